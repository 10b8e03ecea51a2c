package httpapi

// CheckSchedule runs a decoded ScheduleRequest's own checks (for the
// fuzzer).
func CheckSchedule(r *ScheduleRequest) error {
	_, _, err := r.options()
	return err
}
