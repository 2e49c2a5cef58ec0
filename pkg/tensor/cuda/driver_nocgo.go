//go:build !cgo

package cuda

import (
	"errors"
	"unsafe"
)

// driver stands for the CUDA driver in a build without cgo, which cannot
// load it: loadDriver fails, so no other method is ever called. The methods
// exist so that the rest of the package (the Device and its ops) compiles
// the same in both builds.
type driver struct {
	graphs *graphDriver
	gr     *graphRun
}

// cgoEnabled reports that this build cannot load CUDA.
const cgoEnabled = false

// errNoCgo is every CUDA entry point's answer in a build without cgo.
var errNoCgo = errors.New("drafter was built without cgo: CUDA needs it")

func loadDriver(string) (*driver, error) { return nil, errNoCgo }

func (d *driver) loadBLAS(string) (bool, error)          { return false, errNoCgo }
func (d *driver) init() (int, error)                     { return 0, errNoCgo }
func (d *driver) device(int) (int, Info, error)          { return 0, Info{}, errNoCgo }
func (d *driver) start(bool) (int, error)                { return 0, errNoCgo }
func (d *driver) stop() error                            { return errNoCgo }
func (d *driver) release()                               {}
func (d *driver) memInfo() (int64, int64, error)         { return 0, 0, errNoCgo }
func (d *driver) alloc(int) (uint64, error)              { return 0, errNoCgo }
func (d *driver) free(uint64) error                      { return errNoCgo }
func (d *driver) hostAlloc(int) (unsafe.Pointer, error)  { return nil, errNoCgo }
func (d *driver) hostFree(unsafe.Pointer) error          { return errNoCgo }
func (d *driver) cMalloc(int) unsafe.Pointer             { panic(errNoCgo) }
func (d *driver) cFree(unsafe.Pointer)                   {}
func (d *driver) htod(uint64, unsafe.Pointer, int) error { return errNoCgo }
func (d *driver) dtoh(unsafe.Pointer, uint64, int) error { return errNoCgo }
func (d *driver) dtod(uint64, uint64, int) error         { return errNoCgo }
func (d *driver) memset(uint64, uint32, int) error       { return errNoCgo }
func (d *driver) sync() error                            { return errNoCgo }
func (d *driver) eventCreate() (uintptr, error)          { return 0, errNoCgo }
func (d *driver) eventRecord(uintptr) error              { return errNoCgo }
func (d *driver) eventElapsed(uintptr, uintptr) (float32, error) {
	return 0, errNoCgo
}
func (d *driver) eventDestroy(uintptr) error                { return errNoCgo }
func (d *driver) loadModule(string) (uintptr, error)        { return 0, errNoCgo }
func (d *driver) unloadModule(uintptr) error                { return errNoCgo }
func (d *driver) function(uintptr, string) (uintptr, error) { return 0, errNoCgo }
func (d *driver) funcAttr(uintptr, int, int) error          { return errNoCgo }
func (d *driver) launch(uintptr, dim3, dim3, int, unsafe.Pointer) error {
	return errNoCgo
}
func (d *driver) gemm(bool, bool, int, int, int, float32, uint64, int, int, uint64, int, int, float32, uint64, int) error {
	return errNoCgo
}
func (d *driver) gemmBatched(bool, bool, int, int, int, float32, uint64, int, int, int64, uint64, int, int, int64, float32, uint64, int, int64, int) error {
	return errNoCgo
}
func (d *driver) gemmCompute(bool, bool, int, int, int, float32, uint64, int, int, uint64, int, int, float32, uint64, int, int) error {
	return errNoCgo
}

// A second stream and its events (streams.go).

func (d *driver) streamNew() (uintptr, error)                       { return 0, errNoCgo }
func (d *driver) streamFree(uintptr) error                          { return errNoCgo }
func (d *driver) orderEvent() (uintptr, error)                      { return 0, errNoCgo }
func (d *driver) recordOn(uintptr, uintptr) error                   { return errNoCgo }
func (d *driver) waitEvent(uintptr, uintptr) error                  { return errNoCgo }
func (d *driver) hostWait(uintptr) error                            { return errNoCgo }
func (d *driver) dtohOn(unsafe.Pointer, uint64, int, uintptr) error { return errNoCgo }
