package job

import (
	"context"
	"fmt"
	"io"

	"github.com/tprun/tprun/tp"
)

// Main runs the default job in one rank process (what `tprun __rank`
// calls): it joins the job the environment describes and runs Run on it.
// It returns the job's error; the caller turns a non-nil error into a
// non-zero exit status.
func Main(ctx context.Context, cfg *Config, stdout io.Writer) (err error) {
	g, err := tp.Join(ctx)
	if err != nil {
		return fmt.Errorf("job: join: %w", err)
	}
	defer func() {
		// A failed job's error says more than the goodbye that follows it.
		if cerr := g.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("job: rank %d: leaving the group: %w", g.Rank(), cerr)
		}
	}()
	return Run(ctx, g, cfg, stdout)
}
