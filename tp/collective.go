package tp

import "github.com/tprun/tprun/internal/hub"

// ErrCollectiveTimeout: some rank, alive and connected, never joined a
// collective the others waited in, within the collective timeout
// (WithCollectiveTimeout, TPRUN_COLLECTIVE_TIMEOUT). Also ErrAborted: the
// job is over. The concrete error is a *CollectiveTimeoutError.
var ErrCollectiveTimeout = hub.ErrCollectiveTimeout

// CollectiveTimeoutError is a collective that timed out: Collective
// ("Barrier", "AllGather", ...), its number Seq (the how-manyth
// collective of each rank), the Missing ranks with their Hosts and PIDs
// (index-aligned), and the timeout After which the first waiting rank
// gave up. Every rank of the job gets it, the missing ones included.
type CollectiveTimeoutError = hub.CollectiveTimeoutError
