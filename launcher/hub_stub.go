package launcher

import (
	"context"
	"os"
	"path/filepath"
)

// TEMPORARY until internal/hub lands: a directory and nothing listening.
type stubHub struct{ dir string }

func listenHub(cfg hubConfig) (hubServer, error) {
	dir, err := os.MkdirTemp("", "tprun-hub-")
	if err != nil {
		return nil, err
	}
	return &stubHub{dir: dir}, nil
}

func (s *stubHub) Path() string { return filepath.Join(s.dir, "hub.sock") }
func (s *stubHub) Serve(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
func (s *stubHub) Abort(int, string) {}
func (s *stubHub) Close() error      { return os.RemoveAll(s.dir) }
