// Package confine reads a local file on behalf of a tenant, and only under
// the directories the operator named (the roots).
//
// The rule is the same wherever a tenant's file:// is read (the gateway
// hashing a pinned input, a worker fetching one): the path is cleaned and
// must lie under a root as written; its symbolic links are then resolved
// and the resolved path must lie under a root too; only a regular file is
// read, opened non-blocking (a FIFO cannot hang the open) and without
// following a last symbolic link; the read stops when the caller's context
// ends and after a byte bound, whatever the file's size says (a /proc file
// reports 0). Whatever goes wrong before the first byte (no roots, outside
// them, missing, unreadable, not a regular file) is the one error
// ErrRefused, whose text tells nothing of the file: a tenant cannot probe
// what exists outside the roots.
//
// A Stamp (device, inode, size, mtime and ctime, from Stat on the open
// file) tells one version of a file from another without reading it: a
// caller may keep what it learned from the bytes (a digest) for as long as
// the stamp stays the same and was settled when it read them.
package confine
