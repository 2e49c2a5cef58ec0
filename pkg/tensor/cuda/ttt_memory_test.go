package cuda

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/drafter-ai/drafter/pkg/tensor"
)

// TestAttendTTTScratch: AttendTTT and AttendTTTBackward take no device
// memory but their device value's scratch (the arena is untouched), and that
// scratch is O(rows x heads): the staged work items (12 bytes a row or
// tile), the steps' tensor addresses and the backward's D = dout·out (4
// bytes a row and head), never a [steps x seq x seq] score tensor. The
// kernels' own memory is fixed per block (ptx/resources.txt: static shared
// memory and no local memory for every drafter_attend_ttt* kernel), so the
// scratch is all an op adds whatever the sequence's length. Checked for the
// tiled (8-wide heads) and the row kernels (160-wide), on one sequence of
// 128 and of 512 rows: the bound is linear in rows, 16 times under the
// scores of the 512-row sequence's steps.
func TestAttendTTTScratch(t *testing.T) {
	tttKernelsFixed(t)
	d := openTest(t)
	const k = 3 // steps 0..3
	shape := tensor.AttnShape{Heads: 2, KVHeads: 1}
	for _, hd := range []int{8, 160} {
		for _, rows := range []int{128, 512} {
			shape.HeadDim = hd
			t.Run(fmt.Sprintf("hd%d/rows%d", hd, rows), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(hd), uint64(rows)))
				qd, kd := shape.Heads*hd, shape.KVHeads*hd
				var keys, vals, dkeys, dvals []tensor.Tensor
				for m := 0; m <= k; m++ {
					keys = append(keys, devTensor(t, d, randVals(r, rows*kd, 1), rows, kd))
					vals = append(vals, devTensor(t, d, randVals(r, rows*kd, 1), rows, kd))
					dkeys = append(dkeys, devTensor(t, d, make([]float32, rows*kd), rows, kd))
					dvals = append(dvals, devTensor(t, d, make([]float32, rows*kd), rows, kd))
				}
				q := devTensor(t, d, randVals(r, rows*qd, 1), rows, qd)
				dout := devTensor(t, d, randVals(r, rows*qd, 1), rows, qd)
				o := devTensor(t, d, make([]float32, rows*qd), rows, qd)
				l := devTensor(t, d, make([]float32, rows*shape.Heads), rows, shape.Heads)
				g := devTensor(t, d, make([]float32, rows*qd), rows, qd)
				spans := []tensor.Span{{Start: 0, N: rows}}

				s := d.Sibling().(*Device) // scratch of its own, empty
				defer s.Close()
				sh := d.sh
				sh.mu.Lock()
				blocks, next := len(sh.blocks), sh.next
				sh.mu.Unlock()
				s.AttendTTT(o, l, q, keys, vals, shape, spans)
				s.AttendTTTBackward(g, dkeys, dvals, dout, o, l, q, keys, vals, shape, spans)
				s.Sync()
				sh.mu.Lock()
				grewArena := len(sh.blocks) != blocks || sh.next != next
				sh.mu.Unlock()
				if grewArena {
					t.Errorf("AttendTTT allocated device memory outside its scratch")
				}
				used := s.host.size
				for _, b := range s.scr {
					used += b.size
				}
				// What the ops stage: 12 bytes an item (a row, or a tile
				// of rows), the addresses of 4 lists of k+1 tensors, and
				// 4 bytes a row and head of D; each buffer rounded up to
				// at least 4096 bytes in 256-byte units (grown).
				need := 12*rows + 8*4*(k+1) + 4*rows*shape.Heads
				bound := 2*need + 3*4096
				scores := 4 * (k + 1) * rows * rows * shape.Heads
				t.Logf("scratch %d bytes (bound %d); the steps' scores would be %d", used, bound, scores)
				if used > bound {
					t.Errorf("AttendTTT's scratch is %d bytes, over %d (O(rows x heads) for %d rows, %d heads)", used, bound, rows, shape.Heads)
				}
				if rows == 512 && 16*bound > scores {
					t.Fatalf("the bound %d is not far under the scores' %d bytes: the test shows nothing", bound, scores)
				}
			})
		}
	}
}

// tttKernelsFixed fails t unless every drafter_attend_ttt* kernel has, by
// ptxas's report, no stack frame (no per-thread array that could grow with
// a sequence) and static shared memory of at most 48 KiB (the launches ask
// for no dynamic shared memory).
func tttKernelsFixed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "pkg", "tensor", "cuda", "ptx", "resources.txt"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 7 || !strings.HasPrefix(f[0], "drafter_attend_ttt") {
			continue
		}
		n++
		shared, err1 := strconv.Atoi(f[3])
		stack, err2 := strconv.Atoi(f[4])
		if err1 != nil || err2 != nil || stack != 0 || shared > 48<<10 {
			t.Errorf("resources.txt: %s: shared %s bytes, stack %s bytes: want a fixed frame (no stack, at most 48 KiB shared)", f[0]+" "+f[1], f[3], f[4])
		}
	}
	if n == 0 {
		t.Fatal("resources.txt lists no drafter_attend_ttt kernel")
	}
}
