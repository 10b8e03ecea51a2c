package httpapi

// CheckSchedule runs a decoded ScheduleRequest's own checks (for the
// fuzzer).
func CheckSchedule(r *ScheduleRequest) error {
	_, _, err := r.options()
	return err
}

// InflightBody is the bytes of request bodies the API holds now, of
// Options.MaxInflightBody (for tests to wait for a body to be held).
func (a *API) InflightBody() int64 { return a.inflight.Load() }
