package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/train"
	"github.com/drafter-ai/drafter/train/loop"
	trainmethods "github.com/drafter-ai/drafter/train/methods"
)

// trainOptions are what a drafter train command line asks for.
type trainOptions struct {
	Run    train.Options
	JSON   bool
	Out    io.Writer
	Device deviceChoice
}

// trainLong is drafter train's help; the methods' lines come from their
// commands.
func trainLong(cmds []loop.Command, legacy []string) string {
	var list strings.Builder
	for _, mc := range cmds {
		fmt.Fprintf(&list, "  drafter train %-8s %s\n", mc.Kind(), mc.Short())
	}
	return `train reads the shards drafter distill captured from --model and trains a drafter on them,
with the target frozen:

` + list.String() + `
Each subcommand has only its method's flags (drafter train KIND --help lists them and their
defaults). drafter train --method ` + strings.Join(legacy, "|") + ` takes the flags of those methods,
refuses those of a method other than the one chosen, and reads the flags they spell alike (such
as --layers and --warmup) as the chosen method does; it is kept for scripts, and
the subcommands are preferred. Both spellings of the same settings train the same drafter and
resume each other.

--data takes capture folders, a folder of them (every subfolder holding a manifest.json, such
as one per distill --shard i/n), or a quoted glob that drafter expands ('runs/d-*'). Every
capture directory must come from exactly this checkpoint (its manifest's model fingerprint is
checked), hold the columns the method reads and be stored like the others; the shards of a
--shard split must have been made with the same settings and all be there, and are read as one
dataset, by sample id, each sample once. The defaults train well without tuning; training
stops when the method's held-out metric stops improving, and the best weights are exported.
Flags left out keep the method's trainer defaults.

--loss, where a method has it, picks the training loss: ce (the cross-entropy, the default) or
an LK loss (kl, tv, nla, lk_hybrid with --lk-eta, or a JSON object of them to weights), which
trains toward the acceptance rate α of speculative sampling; with an LK loss metrics.jsonl
logs α.

out/ also receives metrics.jsonl, checkpoint.safetensors and drafter.json (method, target
fingerprint, the data manifests' SHA-256, all arguments, final held-out metrics). Ctrl-C
stops cleanly with a checkpoint; run the same command with --resume to continue: the result
is identical to an uninterrupted run. A resume with different settings is refused.`
}

// trainExamples are drafter train's examples: each method's own, then
// --resume, a glob and the --method spelling, shown with the first
// methods.
func trainExamples(cmds []loop.Command, legacy []string) string {
	var b strings.Builder
	for _, mc := range cmds {
		if ex, ok := mc.(interface{ Example() string }); ok {
			b.WriteString(ex.Example() + "\n")
		}
	}
	k := cmds[0].Kind()
	fmt.Fprintf(&b, "  drafter train %s --model /models/my-sft --data caps/a --out drafters/%s --resume\n", k, k)
	fmt.Fprintf(&b, "  drafter train %s --model /models/my-sft --data '/data/distill/shard-*' --out drafters/%s", k, k)
	if len(legacy) > 0 {
		fmt.Fprintf(&b, "\n  drafter train --method %s --model /models/my-sft --data caps/a --out drafters/%s", legacy[0], legacy[0])
	}
	return b.String()
}

// newCmdTrain is drafter train: the --method spelling of the methods that
// keep it (loop.Legacy), with a subcommand per method.
func newCmdTrain(runF func(*trainOptions) error) *cobra.Command {
	cmds := trainmethods.Commands()
	var legacy []loop.Legacy
	var kinds, subs []string
	for _, mc := range cmds {
		if l, ok := mc.(loop.Legacy); ok {
			legacy = append(legacy, l)
			kinds = append(kinds, string(l.Kind()))
			subs = append(subs, "drafter train "+string(l.Kind()))
		}
	}
	c := &cobra.Command{
		Use:     "train --method " + strings.Join(kinds, "|") + " --model DIR --data DIR[,DIR...] --out DIR",
		Short:   "Train a drafter on captured hidden states",
		Long:    trainLong(cmds, kinds),
		Example: trainExamples(cmds, kinds),
		Args:    noArgs,
	}
	var f runFlags
	f.register(c)
	var method string
	c.Flags().StringVar(&method, "method", "", fmt.Sprintf("%s (%s are preferred: each has only its method's flags)", strings.Join(kinds, " or "), strings.Join(subs, " and ")))
	names := registerLegacyFlags(c.Flags(), legacy)
	o := &trainOptions{}
	o.Device.register(c)
	c.RunE = func(c *cobra.Command, _ []string) error {
		return f.run(c, o, runF, func() (loop.Method, error) { return buildLegacy(c.Flags(), names, method, legacy) })
	}
	requireFlags(c, "model", "data", "out", "method")
	c.AddCommand(methodCommands(runF)...)
	return c
}

// declared is a flag as a method declares it.
type declared struct {
	name, usage string
	// value is the flag's registered value: an int, float64, bool, string
	// or uint64.
	value any
}

// declarations records the flags a method declares (a loop.FlagSet), in
// order.
type declarations []declared

func (d *declarations) add(name string, value any, usage string) {
	*d = append(*d, declared{name: name, usage: usage, value: value})
}

func (d *declarations) IntVar(_ *int, name string, v int, usage string) { d.add(name, v, usage) }
func (d *declarations) Float64Var(_ *float64, name string, v float64, usage string) {
	d.add(name, v, usage)
}
func (d *declarations) BoolVar(_ *bool, name string, v bool, usage string) { d.add(name, v, usage) }
func (d *declarations) StringVar(_ *string, name string, v string, usage string) {
	d.add(name, v, usage)
}
func (d *declarations) Uint64Var(_ *uint64, name string, v uint64, usage string) {
	d.add(name, v, usage)
}

// text is the value as the help writes it, "" for a zero value (which
// pflag's help leaves out too).
func (d declared) text() string {
	var s string
	switch v := d.value.(type) {
	case float64:
		s = (*floatValue)(&v).String()
	default:
		s = fmt.Sprint(v)
	}
	if s == "0" || s == "false" {
		return ""
	}
	return s
}

// split separates a usage's trailing "(default ...)" from its text; without
// one the default is the registered value.
func (d declared) split() (text, def string) {
	if i := strings.LastIndex(d.usage, " (default"); i >= 0 && strings.HasSuffix(d.usage, ")") {
		def = strings.TrimPrefix(d.usage[i+len(" (default"):len(d.usage)-1], ":")
		return d.usage[:i], strings.TrimSpace(def)
	}
	return d.usage, d.text()
}

// withDefault is the usage with the default said once.
func (d declared) withDefault() string {
	if strings.Contains(d.usage, "(default") || d.text() == "" {
		return d.usage
	}
	return d.usage + " (default " + d.text() + ")"
}

// registerLegacyFlags declares on fs the flags of drafter train --method:
// every flag of every method in legacy, once, with help that says which
// method reads it and each method's default; a loop.LegacyFlag is a string
// flag, and the method flags it stands for are left out. It returns the
// flags declared.
func registerLegacyFlags(fs *pflag.FlagSet, legacy []loop.Legacy) map[string]bool {
	type entry struct {
		kinds  []string
		decls  []declared
		legacy bool
	}
	entries := map[string]*entry{}
	var order []string
	for _, m := range legacy {
		as := map[string]string{} // the method's flag -> its name under --method
		for _, lf := range m.LegacyFlags() {
			as[lf.Flag] = lf.Name
		}
		var ds declarations
		m.Flags(&ds)
		for _, d := range ds {
			name, isLegacy := d.name, false
			if n, ok := as[d.name]; ok {
				name, isLegacy = n, true
			}
			e := entries[name]
			if e == nil {
				e = &entry{}
				entries[name] = e
				order = append(order, name)
			}
			e.kinds = append(e.kinds, string(m.Kind()))
			e.decls = append(e.decls, d)
			e.legacy = e.legacy || isLegacy
		}
	}
	names := map[string]bool{}
	for _, name := range order {
		e := entries[name]
		names[name] = true
		switch {
		case e.legacy:
			// Each method reads it its own way: say each one's.
			var parts []string
			for i, d := range e.decls {
				parts = append(parts, e.kinds[i]+": "+d.withDefault())
			}
			fs.String(name, "", strings.Join(parts, "; "))
		case len(e.decls) == 1:
			d := e.decls[0]
			declare(fs, name, d.value, e.kinds[0]+": "+d.usage)
		default:
			var texts, defs []string
			for _, d := range e.decls {
				t, v := d.split()
				texts, defs = append(texts, t), append(defs, v)
			}
			usage := texts[0]
			if !allSame(texts) {
				parts := make([]string, len(texts))
				for i, t := range texts {
					parts[i] = e.kinds[i] + ": " + t
				}
				usage = strings.Join(parts, "; ")
			}
			switch {
			case !allSame(defs):
				parts := make([]string, len(defs))
				for i, v := range defs {
					parts[i] = e.kinds[i] + " " + v
				}
				usage += " (default: " + strings.Join(parts, ", ") + ")"
			case defs[0] != "":
				usage += " (default " + defs[0] + ")"
			}
			// The help says the defaults: the flag itself starts at zero.
			declare(fs, name, zero(e.decls[0].value), usage)
		}
	}
	return names
}

// allSame reports whether every element of s equals the first.
func allSame(s []string) bool {
	for _, x := range s {
		if x != s[0] {
			return false
		}
	}
	return true
}

// zero is the zero value of a declared flag's type.
func zero(v any) any {
	switch v.(type) {
	case int:
		return 0
	case float64:
		return 0.0
	case bool:
		return false
	case string:
		return ""
	}
	return uint64(0)
}

// declare defines a flag of drafter train --method holding v's type, from
// v: its text is handed to the chosen method's flag of that name.
func declare(fs *pflag.FlagSet, name string, v any, usage string) {
	switch v := v.(type) {
	case int:
		fs.Int(name, v, usage)
	case float64:
		floatVar(fs, new(float64), name, v, usage)
	case bool:
		fs.Bool(name, v, usage)
	case string:
		fs.String(name, v, usage)
	case uint64:
		fs.Uint64(name, v, usage)
	}
}

// buildLegacy is the method drafter train --method name trains: fs's
// method flags the user gave (names) are handed to the method's own flags,
// a loop.LegacyFlag as the method reads it, and a flag of another method
// only is refused.
func buildLegacy(fs *pflag.FlagSet, names map[string]bool, name string, legacy []loop.Legacy) (loop.Method, error) {
	var m loop.Legacy
	for _, l := range legacy {
		if string(l.Kind()) == name {
			m = l
		}
	}
	if m == nil {
		return nil, otherMethod(name)
	}
	own := pflag.NewFlagSet(name, pflag.ContinueOnError)
	build := m.Flags(methodFlagSet{own})
	renamed := map[string]loop.LegacyFlag{}
	for _, lf := range m.LegacyFlags() {
		renamed[lf.Name] = lf
	}
	var err error
	fs.Visit(func(fl *pflag.Flag) {
		if !names[fl.Name] || err != nil {
			return
		}
		text := fl.Value.String()
		if lf, ok := renamed[fl.Name]; ok {
			text = strings.TrimSpace(text)
			if own.Set(lf.Flag, text) != nil {
				err = usagef("--%s %s: %s", fl.Name, text, lf.Want)
			}
			return
		}
		if own.Lookup(fl.Name) == nil || isRenamed(m, fl.Name) {
			err = usagef("--%s is %s setting; it does not apply to --method %s (drafter train %s lists its flags)", fl.Name, declaredBy(legacy, m, fl.Name), name, name)
			return
		}
		err = own.Set(fl.Name, text)
	})
	if err != nil {
		return nil, err
	}
	method, err := build(own.Changed)
	var fe *loop.FlagError
	if errors.As(err, &fe) {
		for _, lf := range renamed {
			switch {
			case fe.Flag == lf.Flag && fe.Syntax:
				return nil, usagef("--%s %v: %s", lf.Name, fe.Value, lf.Want)
			case fe.Flag == lf.Flag:
				fe.Flag = lf.Name // as the user spelt it
			}
		}
	}
	return method, err
}

// isRenamed reports whether m's flag name is one --method spells otherwise.
func isRenamed(m loop.Legacy, name string) bool {
	for _, lf := range m.LegacyFlags() {
		if lf.Flag == name && lf.Name != name {
			return true
		}
	}
	return false
}

// declaredBy names the settings of the first method other than m that
// has flag name.
func declaredBy(legacy []loop.Legacy, m loop.Legacy, name string) string {
	for _, l := range legacy {
		if l.Kind() == m.Kind() {
			continue
		}
		var ds declarations
		l.Flags(&ds)
		for _, d := range ds {
			if d.name == name {
				return l.Settings()
			}
		}
	}
	return "another method's"
}

func runTrain(ctx context.Context, o *trainOptions) error {
	o.Run.Cache = fileCache()
	dev, err := o.Device.open()
	if err != nil {
		return err
	}
	defer dev.Close()
	o.Run.Device = dev
	res, err := train.Run(ctx, o.Run)
	var fm loop.FlagMistake
	if errors.As(err, &fm) && fm.FlagMistake() {
		return &usageError{err}
	}
	if err != nil {
		return err
	}
	if o.JSON {
		return writeJSON(o.Out, res.Provenance)
	}
	for _, e := range res.Exports {
		fmt.Fprintln(o.Out, e)
	}
	return nil
}

// badPattern returns the first --data entry that is neither an existing path
// nor a valid glob pattern, "" when there is none.
func badPattern(entries []string) string {
	for _, e := range entries {
		if _, err := filepath.Match(e, ""); err != nil {
			if _, err := os.Stat(e); err != nil {
				return e
			}
		}
	}
	return ""
}
