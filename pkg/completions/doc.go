// Package completions is a client for the completion endpoints of LLM serving
// engines (vLLM, SGLang, llama.cpp's llama-server, text-generation-inference):
// it sends a prompt as token ids with explicit sampling settings and a seed,
// and returns the generated token ids, saying where in the answer they came
// from. It knows nothing of drafter's models or tokenizers: the caller renders
// and tokenizes prompts, and re-tokenizes text-only answers with
// Response.Retokenize.
//
// # Endpoints and where the token ids come from
//
// API OpenAI posts to {base}/v1/completions with "prompt" as a list of ids
// (vLLM, SGLang and llama-server all accept that) and asks for ids three ways:
//
//   - "return_token_ids": true. vLLM answers choices[].token_ids
//     (vllm/entrypoints/openai/completion/protocol.py, CompletionRequest and
//     CompletionResponseChoice; serving.py, request_output_to_completion_response),
//     and so does SGLang, from the engine's output_ids
//     (python/sglang/srt/entrypoints/openai/serving_completions.py,
//     _build_completion_response). Source SourceTokenIDs.
//   - "logprobs": 1 with "return_tokens_as_token_ids": true. vLLM then writes
//     each logprobs.tokens[i] as "token_id:N" (serving.py,
//     _create_completion_logprobs). Source SourceLogprobTokens.
//     llama-server maps "logprobs" to n_probs (tools/server/server-task.cpp,
//     params_from_json_cmpl) and answers logprobs.content[i].id
//     (completion_token_output::probs_vector_to_json). Source
//     SourceLogprobIDs.
//   - otherwise only choices[].text is left (an engine without any of the
//     above): Source SourceText, and the caller must re-tokenize.
//
// API LlamaCpp posts to llama-server's native {base}/completion with
// "return_tokens": true and reads "tokens" (server-context.cpp, process_token
// appends every sampled id, the end-of-generation one included). It also sets
// "samplers" so that temperature applies before top-p and min-p, the order of
// Hugging Face and of drafter (llama.cpp's default chain applies it last).
//
// API TGI posts text to text-generation-inference's {base}/generate: TGI
// takes no token-id prompt (router/src/lib.rs: GenerateRequest.inputs and the
// OpenAI Prompt are strings). The client sends Request.PromptText with
// "decoder_input_details", checks that the ids TGI tokenized it to
// (details.prefill) equal Request.Prompt, and reads details.tokens[].id.
// TGI has no min-p; a request with one is refused.
//
// vLLM and llama-server include the stop token that ended the generation in
// the ids they return (vLLM v1/core/sched/utils.py check_stop tests the last
// appended id; llama-server's process_token appends before it checks for an
// end-of-generation token); the client does not rely on it. When an answer
// says it stopped but does not end with a stop id (text answers, whose text
// leaves special tokens out, or an engine that trims it), the stop id the
// engine reports (vLLM stop_reason, SGLang matched_stop) or the only stop id
// of the request is appended, else the answer is refused; ids generated past
// the first stop id (llama-server stops only at its vocabulary's
// end-of-generation tokens, TGI at the model's eos, neither takes
// stop_token_ids) are cut. The ids are checked against the count the server
// reports (usage.completion_tokens, tokens_predicted, generated_tokens).
// Response.Finish says FinishStop or FinishLength either way.
//
// # Robustness
//
// Client.Run keeps Options.Concurrency requests in flight over the base URLs
// (round robin; a URL that fails is skipped for a while and its requests move
// to the others), retries connection errors, timeouts, 429 (honouring
// Retry-After up to MaxRetryAfter, and saying when it cut a longer one) and
// 5xx with exponential backoff and a jitter derived from the request, and
// stops at once, quoting the server, on any other 4xx (a wrong model name, a
// prompt longer than the server's context). Request bodies are a pure
// function of the Request, so the same samples with the same seeds send the
// same bytes. Cancelling the context stops everything promptly.
//
// Client.Connect starts with the servers that answer: a server down at the
// start (a replica restarting) costs one failed attempt, not the run; it is
// left out, said through Options.Notify, and probed in the background until it
// passes the same checks and takes requests. Connect fails only when no server
// answers. An answer of the OpenAI API that names another model than the one
// requested is a *ModelError (Options.AllowServedModel accepts one other
// name): a router answering from another model must not go unnoticed.
package completions
