// Package train is `drafter train`: it binds the frozen target checkpoint, the
// captured hidden-state shards and one of the trainers (train/medusa,
// train/eagle3) together.
//
// Run opens the target (its fingerprint, its lm_head or tied embedding as the
// frozen output layer, its embedding for EAGLE-3), checks every capture
// directory against it before reading a single shard (the manifest's model
// fingerprint must equal the target's; the columns the method reads must have
// been captured), adapts capture.Dataset to the trainers' one dataset interface
// without per-sample allocation, trains with a progress bar, and writes the
// exports plus drafter.json into the output folder:
//
//	out/train_args.json        the settings a --resume must repeat (written first)
//	out/checkpoint.safetensors the resumable training state (the trainers')
//	out/metrics.jsonl          training and held-out evaluation lines
//	out/drafter.json           method, target fingerprint, data manifest hashes,
//	                           all arguments, final metrics
//	out/vllm/, out/medusa/     Medusa exports (train/medusa.Export)
//	out/eagle3/                EAGLE-3 export (native or speculators layout)
//
// Cancelling the context stops training at the next step with a checkpoint; a
// later Run with Resume continues it. A resume whose result-affecting settings,
// target or data differ from the first run's is refused with every difference
// listed.
package train
