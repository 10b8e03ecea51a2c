// Package runs splits a list of jobs to schedule into the calls of the
// library's ScheduleBatch that schedule them as if one at a time, in
// order: for the HTTP API's batches and the RESP front end's pipelined
// commands.
package runs

// Split returns consecutive runs [from, to) of a list of n jobs, whose
// keys (a job's topic and id; "" for a job without an id) key(i) gives,
// each run at most most jobs. ScheduleBatch refuses the same id twice in
// one call, so a job whose key came earlier in the current run starts the
// next one: it then meets that job (a duplicate, or its replacement), as
// it would scheduled on its own after it.
func Split(n, most int, key func(i int) string) [][2]int {
	var out [][2]int
	seen := map[string]bool{}
	from := 0
	for i := range n {
		k := key(i)
		if i-from == most || (k != "" && seen[k]) {
			out = append(out, [2]int{from, i})
			from = i
			clear(seen)
		}
		if k != "" {
			seen[k] = true
		}
	}
	if from < n {
		out = append(out, [2]int{from, n})
	}
	return out
}

// Key is a job's key for Split: its topic and id, "" without an id.
func Key(topic, id string) string {
	if id == "" {
		return ""
	}
	return topic + "\x00" + id
}
