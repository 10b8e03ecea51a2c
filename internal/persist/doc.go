// Package persist is wheelq's Redis side: the key schema, the record
// encoding and the Lua scripts. It knows nothing of the wheel.
//
// Every key of a partition carries the hash tag {ns:p}, so each script
// touches one Redis Cluster slot, and every key a script touches is passed
// in KEYS. The scripts (lua/*.lua, embedded) each start with a header that
// names their KEYS, ARGV and replies. Errors wrap the Redis error with %w;
// a missing job is ErrNotFound, an undecodable record ErrCorrupt, a lost
// lease ErrFenced.
//
// It is internal: its API serves the engine and changes with it, and the
// record encoding and key schema it implements are promised through the
// root package, not through this API. The root re-exports what callers
// need (errors, job states).
package persist
