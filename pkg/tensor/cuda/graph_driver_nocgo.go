//go:build !cgo

package cuda

// graphDriver stands for the capture and graph entry points in a build
// without cgo, where loadGraphs is never reached (no driver loads).
type graphDriver struct{}

func (g *graphDriver) free() {}

func (d *driver) loadGraphs() error                    { return errNoCgo }
func (d *driver) beginCapture() error                  { return errNoCgo }
func (d *driver) endCapture() (uintptr, error)         { return 0, errNoCgo }
func (d *driver) instantiate(uintptr) (uintptr, error) { return 0, errNoCgo }
func (d *driver) graphLaunch(uintptr) error            { return errNoCgo }
func (d *driver) graphDestroy(uintptr, uintptr) error  { return errNoCgo }
func (d *driver) setWorkspace(uint64, int) error       { return errNoCgo }
