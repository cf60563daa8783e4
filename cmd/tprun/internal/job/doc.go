// Package job is tprun's own rank worker, the default job that
// `tprun --tp N` runs when no command is given (through the hidden
// `tprun __rank` subcommand).
//
// flags.go defines the job flags once, for both sides: the launcher parses
// and validates them before any rank starts and forwards them with
// Config.Args; each rank parses them again and calls Main.
//
// What this package must not do: import the launcher, call os.Exit, or
// print anywhere but the writer it is given (the launcher prefixes and
// collects each rank's output). The one deliberate exception is the hidden
// --inject-fault flag, whose whole point is that the rank dies abruptly: the
// rank sends itself SIGKILL at the chosen step, as a crashed rank would.
package job
