package main

import (
	"fmt"
	"sync"
)

// registry maps the handles the C side holds to the Go values behind them.
// A handle is an id, never reused: one that is not registered was either
// closed (its id is below next) or never issued, and both are errors, not
// crashes. Groups and ops share the id space, so a group passed where an op
// is wanted is recognised as such.
type registry struct {
	mu     sync.RWMutex
	next   uintptr
	groups map[uintptr]*group
	ops    map[uintptr]*op
	closed map[uintptr]string // id -> "group" or "op", once closed
}

var handles = &registry{
	next:   1,
	groups: map[uintptr]*group{},
	ops:    map[uintptr]*op{},
	closed: map[uintptr]string{},
}

func (r *registry) addGroup(g *group) uintptr {
	r.mu.Lock()
	defer r.mu.Unlock()
	g.id = r.next
	r.next++
	r.groups[g.id] = g
	return g.id
}

// addOp registers o as an op of g; it fails when g was closed meanwhile.
func (r *registry) addOp(g *group, o *op) (uintptr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups[g.id] != g {
		return 0, fmt.Errorf("group handle %d: %w while the op was created", g.id, errHandleClosed)
	}
	o.id = r.next
	r.next++
	r.ops[o.id] = o
	g.ops[o.id] = o
	return o.id, nil
}

func (r *registry) group(id uintptr) (*group, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if g := r.groups[id]; g != nil {
		return g, nil
	}
	return nil, r.missing(id, "group")
}

func (r *registry) op(id uintptr) (*op, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if o := r.ops[id]; o != nil {
		return o, nil
	}
	return nil, r.missing(id, "op")
}

// missing explains why id is not a live handle of kind; r.mu is held.
func (r *registry) missing(id uintptr, kind string) error {
	switch {
	case id == 0:
		return fmt.Errorf("%w: the %s handle is NULL", errArgument, kind)
	case r.closed[id] == kind:
		return fmt.Errorf("%s handle %d: %w", kind, id, errHandleClosed)
	case r.closed[id] != "":
		return fmt.Errorf("%w: handle %d is a closed %s handle, not %s", errArgument, id, r.closed[id], article(kind))
	case r.groups[id] != nil || r.ops[id] != nil:
		other := "group"
		if r.ops[id] != nil {
			other = "op"
		}
		return fmt.Errorf("%w: handle %d is %s, not %s", errArgument, id, article(other), article(kind))
	}
	return fmt.Errorf("%w: %s handle %d was never issued by this library", errArgument, kind, id)
}

func article(kind string) string {
	if kind == "op" {
		return "an op handle"
	}
	return "a " + kind + " handle"
}

// removeOp unregisters o; it reports false when o was removed already.
func (r *registry) removeOp(o *op) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ops[o.id] != o {
		return false
	}
	delete(r.ops, o.id)
	delete(o.g.ops, o.id)
	r.closed[o.id] = "op"
	return true
}

// removeGroup unregisters g and its ops, and returns the ops for the caller
// to close; ok is false when g was removed already.
func (r *registry) removeGroup(g *group) (ops []*op, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.groups[g.id] != g {
		return nil, false
	}
	for id, o := range g.ops {
		ops = append(ops, o)
		delete(r.ops, id)
		r.closed[id] = "op"
	}
	clear(g.ops)
	delete(r.groups, g.id)
	r.closed[g.id] = "group"
	return ops, true
}
