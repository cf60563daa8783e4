package tp

import (
	"sync"

	"github.com/tprun/tprun/internal/cuda"
)

// The ops of one device context share one loaded copy of the kernels.
// A model holds an op per layer and its decode graph runs one step of each
// in turn: with a module per op, every step would launch code that no
// other step ran since hundreds of MiB of weights streamed through L2,
// and each op would hold its own copy of the whole fatbin in device memory.

// kernelKey names the context a loaded module belongs to.
type kernelKey struct {
	drv engineDriver
	ctx cuda.Context
}

type sharedModule struct {
	k    stepKernels
	refs int
}

// kernelShare hands out references to one loaded module per context; the
// module is unloaded with its last reference. The caller has the context
// of the key bound.
type kernelShare struct {
	mu      sync.Mutex
	modules map[kernelKey]*sharedModule
}

var sharedKernels = &kernelShare{modules: map[kernelKey]*sharedModule{}}

// get returns a reference to key's module, loading it with load the first
// time.
func (s *kernelShare) get(key kernelKey, load func() (stepKernels, error)) (stepKernels, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.modules[key]
	if m == nil {
		k, err := load()
		if err != nil {
			return nil, err
		}
		m = &sharedModule{k: k}
		s.modules[key] = m
	}
	m.refs++
	return &kernelRef{share: s, key: key, m: m}, nil
}

// kernelRef is one op's reference to a shared module.
type kernelRef struct {
	share *kernelShare
	key   kernelKey
	m     *sharedModule
	once  sync.Once
}

var _ stepKernels = (*kernelRef)(nil)

func (r *kernelRef) launchSkinny(s cuda.Stream, a skinnyLaunch, pdl bool) error {
	return r.m.k.launchSkinny(s, a, pdl)
}

func (r *kernelRef) launchReceive(s cuda.Stream, a receiveLaunch) error {
	return r.m.k.launchReceive(s, a)
}

// unload drops this reference (once); the last one unloads the module.
func (r *kernelRef) unload() (err error) {
	r.once.Do(func() {
		r.share.mu.Lock()
		defer r.share.mu.Unlock()
		r.m.refs--
		if r.m.refs > 0 {
			return
		}
		delete(r.share.modules, r.key)
		err = r.m.k.unload()
	})
	return err
}
