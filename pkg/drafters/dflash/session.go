package dflash

import (
	"fmt"

	"github.com/drafter-ai/drafter/pkg/model"
)

// Target is what the draft borrows from the target model: its input
// embedding (the block's query inputs) and its lm_head (the draft's logits).
type Target interface {
	// Embed writes token id's embedding row [Hd] into dst.
	Embed(dst []float32, id int) error
	// Logits writes the logits [rows, V] of rows final-normed hidden states
	// y [rows, Hd] into dst.
	Logits(dst, y []float32, rows int) error
}

// modelTarget is a loaded target model as a Target.
type modelTarget struct{ m *model.Model }

// ModelTarget returns m's embedding and lm_head as a Target.
func ModelTarget(m *model.Model) Target { return modelTarget{m} }

func (t modelTarget) Embed(dst []float32, id int) error {
	if id < 0 || id >= t.m.Embed.Rows {
		return fmt.Errorf("dflash: token %d is outside the target vocabulary [0, %d)", id, t.m.Embed.Rows)
	}
	t.m.Embed.Row(dst, id)
	return nil
}

func (t modelTarget) Logits(dst, y []float32, rows int) error {
	return t.m.LogitsFromHidden(dst, y, rows)
}

// HostTarget is a target's embedding and lm_head held as float32 on the
// host ([V, H] each), as a trainer holds them.
type HostTarget struct {
	EmbedW, LMHead []float32
	V, H           int
}

// Embed implements Target.
func (t *HostTarget) Embed(dst []float32, id int) error {
	if id < 0 || id >= t.V {
		return fmt.Errorf("dflash: token %d is outside the target vocabulary [0, %d)", id, t.V)
	}
	copy(dst, t.EmbedW[id*t.H:(id+1)*t.H])
	return nil
}

// Logits implements Target.
func (t *HostTarget) Logits(dst, y []float32, rows int) error {
	linear[float32](nil, dst[:rows*t.V], y[:rows*t.H], t.LMHead, rows, t.H, t.V, false)
	return nil
}

// Draft is a DFlash draft for inference: its geometry and parameters, and
// the Hugging Face hidden_states indices of the target layers it fuses.
type Draft struct {
	Geometry Geometry
	Params   *Params
	// LayerIDs are the HF hidden_states indices of the fused target
	// layers (the residual stream after layer k-1), in fc's input order.
	LayerIDs []int
	// TargetLayers is the target's num_hidden_layers the export records
	// (0 when unknown).
	TargetLayers int
}

// NewSession allocates a drafting session for up to capacity verified
// positions.
func (d *Draft) NewSession(capacity int) *Session {
	g := d.Geometry
	return &Session{d: d, Context: NewContext(g, d.Params, capacity), emb: make([]float32, g.BlockSize*g.Hidden)}
}

// Session is one sequence's DFlash drafting state: its Context (the
// verified positions' keys and values) and the block's embeddings.
type Session struct {
	*Context
	d   *Draft
	emb []float32
}

// Context is the part of a drafting session that DFlash and DSpark share:
// every draft layer's injected keys and values of the verified positions
// 0..Len()-1 whose target features it has been given (the context KV
// cache), and the network that computes them and runs a block over them.
// The next block's anchor sits at position Len(): its own target state
// does not exist until it is verified.
type Context struct {
	g        Geometry
	net      *Net[float32]
	capacity int
	n        int
	kc, vc   [][]float32 // per layer [capacity, kvDim]
	kcN, vcN [][]float32 // per layer the filled rows of kc and vc
	pos      []int
	blocks   [1]Block
}

// NewContext allocates an empty context of up to capacity positions for a
// draft of geometry g and parameters p.
func NewContext(g Geometry, p *Params, capacity int) *Context {
	c := &Context{g: g, capacity: capacity, net: NewNet[float32](g, p, nil)}
	c.kc, c.vc = make([][]float32, g.Layers), make([][]float32, g.Layers)
	c.kcN, c.vcN = make([][]float32, g.Layers), make([][]float32, g.Layers)
	for l := range g.Layers {
		c.kc[l] = make([]float32, capacity*g.KVDim())
		c.vc[l] = make([]float32, capacity*g.KVDim())
	}
	return c
}

// Len is the number of cached context positions.
func (c *Context) Len() int { return c.n }

// Crop drops the cached positions from n on.
func (c *Context) Crop(n int) { c.n = min(c.n, max(n, 0)) }

// Append caches the context of m new positions Len()..Len()+m-1 from their
// fused target features feats [m, Features*H]: c = hidden_norm(fc(feats)),
// and each layer's k_norm(Wk c) (RoPE'd at the positions) and Wv c.
func (c *Context) Append(feats []float32) error {
	g := c.g
	m := len(feats) / g.FCIn()
	if m*g.FCIn() != len(feats) {
		return fmt.Errorf("draft context: %d feature values are not rows of %d", len(feats), g.FCIn())
	}
	if c.n+m > c.capacity {
		return fmt.Errorf("draft context: %d context positions exceed the session's capacity %d", c.n+m, c.capacity)
	}
	if m == 0 {
		return nil
	}
	c.pos = c.pos[:0]
	for i := range m {
		c.pos = append(c.pos, c.n+i)
	}
	if err := c.net.Context(feats, c.pos); err != nil {
		return err
	}
	kd := g.KVDim()
	for l := range g.Layers {
		copy(c.kc[l][c.n*kd:(c.n+m)*kd], c.net.Kc[l])
		copy(c.vc[l][c.n*kd:(c.n+m)*kd], c.net.Vc[l])
	}
	c.n += m
	return nil
}

// Forward runs the draft layers on one block's input embeddings emb
// [B, Hd] at positions Len()..Len()+B-1 over the whole cached context and
// returns the block's outputs [B, Hd] (final-normed; valid until the next
// call).
func (c *Context) Forward(emb []float32) ([]float32, error) {
	kd := c.g.KVDim()
	for l := range c.g.Layers {
		c.kcN[l], c.vcN[l] = c.kc[l][:c.n*kd], c.vc[l][:c.n*kd]
	}
	c.blocks[0] = Block{Row0: 0, Start: c.n, Ctx: c.n}
	if err := c.net.Blocks(emb, c.blocks[:], c.kcN, c.vcN); err != nil {
		return nil, err
	}
	return c.net.Y[:c.g.BlockSize*c.g.Hidden], nil
}

// Block runs one draft forward on the block [anchor, mask, ..., mask] at
// positions Len()..Len()+B-1 over the whole cached context, with t's
// embedding, and writes the logits of slots 1..B-1 into dst [(B-1), V]:
// row k-1 is the draft's distribution of the token k places after the
// anchor.
func (s *Session) Block(t Target, anchor int, dst []float32) error {
	g := s.d.Geometry
	B, h := g.BlockSize, g.Hidden
	if len(dst) != (B-1)*g.Vocab {
		return fmt.Errorf("dflash: block logits need %d values, got %d", (B-1)*g.Vocab, len(dst))
	}
	if err := t.Embed(s.emb[:h], anchor); err != nil {
		return err
	}
	if err := t.Embed(s.emb[h:2*h], g.MaskToken); err != nil {
		return err
	}
	for k := 2; k < B; k++ {
		copy(s.emb[k*h:(k+1)*h], s.emb[h:2*h])
	}
	y, err := s.Forward(s.emb)
	if err != nil {
		return err
	}
	return t.Logits(dst, y[h:], B-1)
}
