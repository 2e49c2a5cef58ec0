package cuda

import "time"

// Timer measures the device's own time between two points of its stream
// with a pair of CUDA events, so that a measurement counts the GPU's work
// and not the host's waiting for it (kernel launches are asynchronous).
type Timer struct {
	d           *Device
	start, stop uintptr
}

// NewTimer makes a timer on the device's stream; Close frees it.
func (d *Device) NewTimer() (*Timer, error) {
	t := &Timer{d: d}
	var err error
	if t.start, err = d.sh.drv.eventCreate(); err != nil {
		return nil, err
	}
	if t.stop, err = d.sh.drv.eventCreate(); err != nil {
		d.sh.drv.eventDestroy(t.start)
		return nil, err
	}
	return t, nil
}

// Start marks the start: the work enqueued after it is measured.
func (t *Timer) Start() { t.d.check("Timer.Start", t.d.sh.drv.eventRecord(t.start)) }

// Stop marks the end, waits for the work between Start and Stop to finish
// and returns the device time it took.
func (t *Timer) Stop() time.Duration {
	t.d.check("Timer.Stop", t.d.sh.drv.eventRecord(t.stop))
	ms, err := t.d.sh.drv.eventElapsed(t.start, t.stop)
	t.d.check("Timer.Stop", err)
	return time.Duration(float64(ms) * float64(time.Millisecond))
}

// Close frees the timer's events.
func (t *Timer) Close() error {
	err := t.d.sh.drv.eventDestroy(t.start)
	if e := t.d.sh.drv.eventDestroy(t.stop); err == nil {
		err = e
	}
	return err
}
