package job

import (
	"context"
	"fmt"
	"io"
	"os"
)

// Main runs the default job in one rank process and returns its error; the
// caller turns a non-nil error into a non-zero exit status.
//
// TEMPORARY until package tp lands: it only reports the rank's environment.
func Main(ctx context.Context, cfg *Config, stdout io.Writer) error {
	_, err := fmt.Fprintf(stdout, "rank %s of %s pid %d\n", os.Getenv("TPRUN_RANK"), os.Getenv("TPRUN_WORLD_SIZE"), os.Getpid())
	return err
}
