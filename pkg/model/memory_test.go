package model

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/drafter-ai/drafter/pkg/checkpoint"
	"github.com/drafter-ai/drafter/pkg/safetensors"
	"github.com/drafter-ai/drafter/pkg/tensor"
)

// memory1BConfig is a Llama of about 1.1B parameters (TinyLlama's shape:
// hidden 2048, 22 layers, 32 heads, 4 KV heads, vocabulary 32000, untied).
func memory1BConfig() map[string]any {
	return map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
		"num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 64, "hidden_act": "silu",
		"max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": 32000,
		"tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
	}
}

// writeRandomBF16 writes config and a bf16 model.safetensors of random
// weights for it into dir, streaming: tensor by tensor from a small buffer
// of random bf16 values, so that the test never holds the weights (let
// alone a float32 copy) in memory. It returns the file's size.
func writeRandomBF16(t *testing.T, dir string, config map[string]any) int64 {
	t.Helper()
	b, err := json.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := checkpoint.LoadConfig(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		DType   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	header := map[string]entry{}
	specs := cfg.Tensors()
	var off int64
	for _, s := range specs {
		n := int64(2 * product(s.Shape))
		header[s.Name] = entry{"BF16", s.Shape, []int64{off, off + n}}
		off += n
	}
	hdr, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	hdr = append(hdr, bytes.Repeat([]byte{' '}, (8-len(hdr)%8)%8)...)
	f, err := os.Create(filepath.Join(dir, safetensors.SingleFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	w.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))))
	w.Write(hdr)
	// 1 MiB of random weights (standard deviation 0.02) and of norm weights
	// near 1, written over and over from a moving offset.
	r := rand.New(rand.NewPCG(11, 12))
	const pool = 1 << 19
	weights, norms := make([]byte, 2*pool), make([]byte, 2*pool)
	for i := 0; i < pool; i++ {
		binary.LittleEndian.PutUint16(weights[2*i:], safetensors.BF16Bits(float32(r.NormFloat64()*0.02)))
		binary.LittleEndian.PutUint16(norms[2*i:], safetensors.BF16Bits(float32(1+r.NormFloat64()*0.1)))
	}
	for i, s := range specs {
		src := weights
		if strings.HasSuffix(s.Name, "norm.weight") {
			src = norms
		}
		left := 2 * product(s.Shape)
		for p := (i * 4099 * 2) % len(src); left > 0; p = 0 {
			n := min(left, len(src)-p)
			if _, err := w.Write(src[p : p+n]); err != nil {
				t.Fatal(err)
			}
			left -= n
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return 8 + int64(len(hdr)) + off
}

// procStatus returns a field of /proc/self/status in bytes ("VmRSS",
// "VmHWM").
func procStatus(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/self/status has no %s", field)
	return 0
}

// TestMemoryBF16 loads a random-weight bf16 Llama of about 1.1B parameters
// (a 2.2 GB file) and runs a prefill and a decode step: the resident memory
// the load and the passes add (the peak, VmHWM, over the process's resident
// memory before, with the peak reset; the mapped file's pages count once
// read) stays below 1.25 times the file plus the caches (KV cache and
// activations). A float32 copy of the weights would double the file.
func TestMemoryBF16(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads the peak resident memory from /proc/self/status: Linux only")
	}
	if testing.Short() {
		t.Skip("writes and reads a 2.2 GB checkpoint: skipped in -short mode")
	}
	dir := t.TempDir()
	var fs syscall.Statfs_t
	const need = 2_300_000_000
	if err := syscall.Statfs(dir, &fs); err != nil || int64(fs.Bavail)*int64(fs.Bsize) < 2*need {
		t.Skipf("the 1.1B-parameter checkpoint needs %.1f GB of free disk in %s (with room to spare): %d bytes free (%v)",
			need/1e9, dir, int64(fs.Bavail)*int64(fs.Bsize), err)
	}
	size := writeRandomBF16(t, dir, memory1BConfig())
	runtime.GC()
	debug.FreeOSMemory()
	// Writing 5 to clear_refs resets VmHWM to the current resident size.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak resident memory (/proc/self/clear_refs): %v", err)
	}
	base := procStatus(t, "VmRSS")

	m, err := Load(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if p := m.Config.NumParams(); p < 1e9 {
		t.Fatalf("the model has %d parameters, want at least 1B", p)
	}
	const capacity = 32
	seq := mustSeq(t, m, capacity)
	prompt := []int{1, 450, 4996, 17354, 1701, 29916, 432, 17204}
	res, err := m.Forward([]Input{{Seq: seq, Tokens: prompt}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	next := argmax(res.LogitsOf(0))
	res, err = m.Forward([]Input{{Seq: seq, Tokens: []int{next}}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.LogitsOf(0) {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			t.Fatal("a logit is not finite")
		}
	}
	peak := procStatus(t, "VmHWM")

	// The caches: the sequence's K, V and transposed K per layer, and the
	// activations of the largest pass (prefill rows through every scratch
	// buffer, one row of logits).
	L, rows := int64(m.NumLayers()), int64(len(prompt))
	kv := int64(capacity) * L * 3 * int64(m.kvDim) * 4
	act := rows*int64(4*m.h+2*m.qDim+2*m.kvDim+2*m.inter+max(2*m.inter, m.qDim+2*m.kvDim))*4 + int64(m.h+m.vocab)*4
	limit := size + size/4 + kv + act
	mem := m.Memory()
	t.Logf("file %.3f GB; weights %.3f GB (%s mapped %.3f GB); resident before %.0f MB, peak %.0f MB: +%.3f GB (limit %.3f GB = 1.25 x file + %.1f MB caches)",
		float64(size)/1e9, float64(mem.Total())/1e9, tensor.BF16, float64(mem.Mapped)/1e9, float64(base)/1e6, float64(peak)/1e6,
		float64(peak-base)/1e9, float64(limit)/1e9, float64(kv+act)/1e6)
	if mem.Mapped < size*99/100 {
		t.Errorf("only %d of the file's %d bytes are read in place", mem.Mapped, size)
	}
	if peak-base > limit {
		t.Errorf("loading and two passes added %s of resident memory, over the limit %s", gb(peak-base), gb(limit))
	}
}

func gb(n int64) string { return fmt.Sprintf("%.3f GB", float64(n)/1e9) }
