package cuda

import (
	"fmt"
	"unsafe"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// The device copies states to the host on a second stream.
var _ tensor.StateCopier = (*Device)(nil)

// stateCopy is the CUDA tensor.StateCopy: per buffer, a device staging area
// written on the device's stream (a device-to-device copy of the sources, so
// that the next pass may overwrite them at once) and pinned host memory
// that a second stream fills from it once the event recorded after the
// staging copy has completed; another event, recorded after that copy on
// the second stream, tells Wait the host buffer is full. Staging area b is
// rewritten only by Start(b), which may come only after Wait(b): the host
// has then synchronized with the copy that read it, so the device's stream
// is ordered after it (the stand-in checks both orders, see its
// stream_order test).
type stateCopy struct {
	d           *Device
	parts, cols int
	stream      uintptr    // the copies' stream
	staged      [2]uintptr // recorded on the device's stream after the staging copy
	copied      [2]uintptr // recorded on the copy stream after the host copy
	buf         [2]stateBuf
}

// stateBuf is one buffer: capacity rows, rows in flight (or read last),
// busy between Start and Wait.
type stateBuf struct {
	capRows, rows int
	stage         uint64
	pinned        unsafe.Pointer
	views         [][]float32
	busy          bool
}

// NewStateCopy makes a double-buffered copier on a stream of its own.
func (d *Device) NewStateCopy(parts, cols int) (tensor.StateCopy, error) {
	if parts < 1 || cols < 1 {
		return nil, fmt.Errorf("cuda: a state copy of %d parts of %d columns", parts, cols)
	}
	drv := d.sh.drv
	c := &stateCopy{d: d, parts: parts, cols: cols}
	var err error
	if c.stream, err = drv.streamNew(); err != nil {
		return nil, fmt.Errorf("cuda: state copy stream: %v", err)
	}
	for b := range c.buf {
		if c.staged[b], err = drv.orderEvent(); err == nil {
			c.copied[b], err = drv.orderEvent()
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("cuda: state copy events: %v", err)
		}
		c.buf[b].views = make([][]float32, parts)
	}
	return c, nil
}

// grow gives buffer b room for rows rows, reallocating (only) when a pass
// has more rows than any before it; the buffer is idle then.
func (c *stateCopy) grow(b, rows int) {
	s := &c.buf[b]
	if rows <= s.capRows {
		return
	}
	drv := c.d.sh.drv
	n := max(rows, 2*s.capRows)
	bytes := c.parts * n * c.cols * 4
	if s.stage != 0 {
		c.d.check("freeing a state copy's staging", drv.free(s.stage))
		c.d.check("freeing a state copy's pinned buffer", drv.hostFree(s.pinned))
		s.stage, s.pinned, s.capRows = 0, nil, 0
	}
	p, err := drv.alloc(bytes)
	if err != nil {
		panic(fmt.Sprintf("cuda: state copy staging of %s: %v", gib(int64(bytes)), err))
	}
	h, err := drv.hostAlloc(bytes)
	if err != nil {
		drv.free(p)
		panic(fmt.Sprintf("cuda: pinning %s for a state copy: %v", gib(int64(bytes)), err))
	}
	s.stage, s.pinned, s.capRows = p, h, n
}

// Start stages srcs on the device's stream and queues their copy to the
// pinned buffer on the copy stream, after the staging copy.
func (c *stateCopy) Start(b int, srcs []tensor.Tensor) {
	s := &c.buf[b]
	if s.busy {
		panic(fmt.Sprintf("cuda: state copy buffer %d started again before Wait", b))
	}
	if len(srcs) != c.parts {
		panic(fmt.Sprintf("cuda: state copy of %d parts, made for %d", len(srcs), c.parts))
	}
	rows := srcs[0].Rows()
	for _, t := range srcs {
		if t.DType() != tensor.F32 || t.Rows() != rows || t.Cols() != c.cols {
			panic(fmt.Sprintf("cuda: state copy of a %dx%d %s part, want %dx%d float32", t.Rows(), t.Cols(), t.DType(), rows, c.cols))
		}
	}
	c.grow(b, rows)
	drv := c.d.sh.drv
	part := rows * c.cols * 4
	for i, t := range srcs {
		c.d.check("staging states", drv.dtod(s.stage+uint64(i*part), tensor.DeviceAddr(t), part))
	}
	c.d.check("ordering a state copy", drv.recordOn(c.staged[b], 0))
	c.d.check("ordering a state copy", drv.waitEvent(c.stream, c.staged[b]))
	c.d.check("copying states to the host", drv.dtohOn(s.pinned, s.stage, c.parts*part, c.stream))
	c.d.check("ordering a state copy", drv.recordOn(c.copied[b], c.stream))
	s.rows, s.busy = rows, true
}

// Wait waits for buffer b's copy and returns views of its pinned memory.
func (c *stateCopy) Wait(b int) [][]float32 {
	s := &c.buf[b]
	if !s.busy {
		panic(fmt.Sprintf("cuda: state copy buffer %d waited on without Start", b))
	}
	c.d.check("waiting for a state copy", c.d.sh.drv.hostWait(c.copied[b]))
	s.busy = false
	all := unsafe.Slice((*float32)(s.pinned), c.parts*s.capRows*c.cols)
	n := s.rows * c.cols
	for i := range s.views {
		s.views[i] = all[i*n : (i+1)*n : (i+1)*n]
	}
	return s.views
}

// Close waits for the copy stream and frees the stream, events and buffers.
func (c *stateCopy) Close() error {
	drv := c.d.sh.drv
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	if c.stream != 0 {
		keep(drv.streamFree(c.stream))
		c.stream = 0
	}
	for b := range c.buf {
		for _, e := range []*uintptr{&c.staged[b], &c.copied[b]} {
			if *e != 0 {
				keep(drv.eventDestroy(*e))
				*e = 0
			}
		}
		s := &c.buf[b]
		if s.stage != 0 {
			keep(drv.free(s.stage))
			keep(drv.hostFree(s.pinned))
		}
		*s = stateBuf{}
	}
	if first != nil {
		return fmt.Errorf("cuda: closing a state copy: %v", first)
	}
	return nil
}
