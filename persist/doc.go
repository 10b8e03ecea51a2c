// Package persist is wheelq's Redis side: the key schema, the record
// encoding, the Lua scripts and group commit. It knows nothing of the
// wheel.
//
// Every key of a partition carries the hash tag {ns:p}, so each script
// touches one Redis Cluster slot, and every key a script touches is passed
// in KEYS. The scripts (lua/*.lua, embedded) each start with a header that
// names their KEYS, ARGV and replies. Errors wrap the Redis error with %w;
// a missing job is ErrNotFound, an undecodable record ErrCorrupt, a lost
// lease ErrFenced.
//
// Stability: this package is importable, but its API serves wheelq and may
// change in any minor release before v1.
package persist
