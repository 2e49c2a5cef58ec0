package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/drafter-ai/drafter/pkg/completions"
)

// maxConcurrency bounds --concurrency against typos: each request in flight
// holds a connection and an answer in memory, and no serving fleet keeps
// more than a few thousand sequences running.
const maxConcurrency = 4096

// generatorFlags are distill's flags for generation by serving engines.
type generatorFlags struct {
	urls               []string
	api, model, keyEnv string
	servedModel        string
	concurrency        int
	timeout            time.Duration
}

// generatorOnly are the flags that tune --generator and mean nothing without it.
func generatorOnly() []string {
	return []string{"generator-api", "generator-model", "allow-served-model", "concurrency", "request-timeout", "api-key-env"}
}

func (f *generatorFlags) register(fs *pflag.FlagSet) {
	fs.StringSliceVar(&f.urls, "generator", nil, "generate with serving engines at these OpenAI-compatible base URLs, comma-separated (vLLM, SGLang, llama.cpp's llama-server, text-generation-inference), and capture the states here with teacher-forced prefills")
	fs.StringVar(&f.api, "generator-api", string(completions.OpenAI), "endpoint of the --generator servers: openai (/v1/completions), llamacpp (llama-server's /completion, Hugging Face's sampler order) or tgi (/generate)")
	fs.StringVar(&f.model, "generator-model", "", "model name to request from the --generator servers (default: the one they list at /v1/models)")
	fs.StringVar(&f.servedModel, "allow-served-model", "", "accept --generator answers that name this model instead of the one requested (a router or gateway reporting another name for the same checkpoint), and record it in manifest.json; without it such answers stop the run")
	fs.IntVar(&f.concurrency, "concurrency", 8, fmt.Sprintf("requests in flight to the --generator servers, 1 to %d", maxConcurrency))
	fs.DurationVar(&f.timeout, "request-timeout", 10*time.Minute, "time limit of one request to a --generator server, e.g. 90s or 10m (an expired request is retried)")
	fs.StringVar(&f.keyEnv, "api-key-env", "OPENAI_API_KEY", "environment variable holding the --generator servers' API key (sent as a Bearer token when set)")
}

// checks are the generator flags' rules.
func (f *generatorFlags) checks() []flagCheck {
	_, apiErr := completions.ParseAPI(f.api)
	bad := f.badURL()
	return []flagCheck{
		{"generator", len(f.urls) == 0, "one or more base URLs such as http://vllm-0:8000, comma-separated"},
		{"generator", bad != "", bad},
		{"generator-api", apiErr != nil, fmt.Sprintf("%s, %s or %s", completions.OpenAI, completions.LlamaCpp, completions.TGI)},
		// Only the OpenAI API names the model in its requests and answers.
		{"allow-served-model", f.servedModel == "" || (apiErr == nil && completions.API(f.api) != completions.OpenAI),
			fmt.Sprintf("a model name, with --generator-api %s (the other APIs name no model)", completions.OpenAI)},
		{"concurrency", f.concurrency < 1 || f.concurrency > maxConcurrency, fmt.Sprintf("1 to %d requests in flight", maxConcurrency)},
		{"request-timeout", f.timeout <= 0, "a positive duration such as 90s or 10m"},
		{"api-key-env", f.keyEnv == "", "the name of an environment variable"},
	}
}

// badURL says what is wrong with the --generator URLs, "" when nothing is.
func (f *generatorFlags) badURL() string {
	seen := map[string]string{}
	for _, u := range f.urls {
		base, err := completions.BaseURL(u)
		if err != nil {
			return fmt.Sprintf("base URLs such as http://vllm-0:8000 or https://host/prefix, without credentials (%q is not one)", u)
		}
		if prev, ok := seen[base]; ok {
			return fmt.Sprintf("each server once (%s and %s are the same server)", prev, u)
		}
		seen[base] = u
	}
	return ""
}

// options checks the generator flags of c and returns the client options,
// nil without --generator. The API key is read from the environment here,
// so that it never appears on a command line or in the options' flag record.
func (f *generatorFlags) options(c *cobra.Command) (*completions.Options, error) {
	if !c.Flags().Changed("generator") {
		for _, n := range generatorOnly() {
			if c.Flags().Changed(n) {
				return nil, usagef("--%s applies to --generator only", n)
			}
		}
		return nil, nil
	}
	if err := checkFlags(c, f.checks()); err != nil {
		return nil, err
	}
	api, _ := completions.ParseAPI(f.api)
	return &completions.Options{URLs: f.urls, API: api, Model: f.model, APIKey: os.Getenv(f.keyEnv),
		Concurrency: f.concurrency, Timeout: f.timeout, AllowServedModel: f.servedModel}, nil
}

// generatorError adds to a server's refusal of the credentials that no key
// was sent, and where drafter looked for one; and to an answer from another
// model than requested the flag that accepts it, should that model be the
// checkpoint under another name.
func generatorError(err error, opt *completions.Options, keyEnv string) error {
	if opt == nil {
		return err
	}
	var me *completions.ModelError
	if errors.As(err, &me) {
		return fmt.Errorf("%w; if %q is this checkpoint under another name, pass --allow-served-model %s (manifest.json records it)", err, me.Served, me.Served)
	}
	var se *completions.StatusError
	if opt.APIKey != "" || !errors.As(err, &se) || (se.Status != 401 && se.Status != 403) {
		return err
	}
	return fmt.Errorf("%w (no API key was sent: $%s is not set; set it, or name the variable holding the key with --api-key-env)", err, keyEnv)
}
