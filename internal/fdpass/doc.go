// Package fdpass is what passing file descriptors over a Unix stream
// socket needs, shared by the rendezvous hub and by the group that rides
// on a framework's collectives: sending bytes with descriptors attached
// (SCM_RIGHTS), reading them back, the peer's credentials (SO_PEERCRED),
// close-on-exec duplicates, and making blocked socket I/O give up when a
// context ends.
//
// What it must not do: frame or interpret the bytes (each caller has its
// own protocol), or keep any descriptor it returned: the caller owns
// those.
package fdpass
