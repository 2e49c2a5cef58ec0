// Package train is `drafter train`, the second stage: it binds the frozen
// target checkpoint, the captured hidden-state shards and one drafter method
// together. The method comes as its options (Options.Method, a loop.Method:
// medusa.Options from train/medusa, eagle3.Options from train/eagle3), so
// Run knows no method by name; every method trains with the one loop in
// train/loop.
//
// Run opens the target, asks the method which captured states it reads,
// resolves the --data entries to capture folders (a folder, a folder of them
// such as one per --shard of a cluster distill, or a glob pattern:
// ExpandData), checks every capture directory against the target before
// reading a single shard (the manifest's model fingerprint must equal the
// target's; the columns the method reads must have been captured; all are
// stored alike; the shards of a --shard split were made with the same
// settings and are all there), verifies the shards, adapts capture.Dataset to
// the trainers' one dataset interface without per-sample allocation (the
// shards of a split read as one dataset, by sample id, each sample once), and
// hands all of it to the method, which trains
// with a progress bar and writes into the output folder:
//
//	out/train_args.json        the settings a --resume must repeat (written first)
//	out/checkpoint.safetensors the resumable training state
//	out/metrics.jsonl          training and held-out evaluation lines
//	out/drafter.json           method, target fingerprint, data manifest hashes,
//	                           all arguments, final metrics
//	out/vllm/, out/medusa/     Medusa exports (pkg/drafters/medusa.Export)
//	out/eagle3/                EAGLE-3 export (native or speculators layout)
//
// Cancelling the context stops training at the next step with a checkpoint; a
// later Run with Resume continues it. A resume whose result-affecting settings,
// target or data differ from the first run's is refused with every difference
// listed.
package train
