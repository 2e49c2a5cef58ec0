// Package capture stores the hidden states of a teacher model as Apache Arrow IPC files
// ("shards") plus a manifest, and reads them back for training.
//
// # On-disk layout
//
// A capture directory holds:
//
//	manifest.json        what was captured, how, and the list of finished shards
//	shard-00000.arrow    Arrow IPC *file* format (not the stream format), uncompressed
//	shard-00001.arrow
//	...
//
// Every shard has one row per token position and these columns, all non-nullable:
//
//	sample_id   int64     the caller's id of the sample (prompt) the token belongs to
//	position    int32     0-based index of the token inside its sample
//	token_id    int32     the token id
//	loss_mask   bool      true on response (assistant/generated) tokens, false on the prompt
//	hidden_<k>  FixedSizeList<float16 or float32>[H], one per captured layer index k
//	final_norm  FixedSizeList<float16 or float32>[H], when the post-final-norm state is kept
//
// Layer indices follow the Hugging Face Transformers hidden_states numbering: index 0 is the
// embedding output and index k (1 <= k < num_layers) is the residual stream after decoder
// layer k-1, before the final norm. hidden_<num_layers> means the residual stream after the
// last decoder layer BEFORE the final norm. Note that Transformers' own hidden_states tuple
// holds, at its last index, the state AFTER the final norm; that state is stored here under
// the separate name final_norm, so the two never get confused. See [LayerConvention].
//
// The rows of one sample are contiguous, in position order, and never split across shards or
// across record batches, so a sample is read from one contiguous slice of one record batch.
// Schema metadata records the format version, hidden size, dtype, layers and the layer
// convention; each state field carries the metadata key "hf_hidden_states_index" ("k" or
// "final_norm").
//
// float16 storage rounds to nearest, ties to even, through pkg/tensor's one conversion (not
// arrow-go's float16.New, which truncates). A value that does
// not fit float16 (|x| > 65504 after rounding) and any inf or NaN input is an error naming the
// sample, position and column; nothing is ever stored as a silent inf. float32 storage also
// rejects inf and NaN.
//
// # Verification
//
// [OpenDataset] and [Verify] verify every listed shard, several at once: the file's size and
// SHA-256 must match the manifest, and every stored state must be finite (tested on the raw
// float16 or float32 bits, no decoding). The file is hashed before it is parsed, because
// arrow-go panics or exhausts memory on some damaged Arrow metadata; the states are then
// scanned from memory (the hash brought the file in, so it is read from disk once). A mismatch
// names the file; a non-finite value names the file, row, sample id, position and column. [DatasetOptions.Cache] remembers verified shards by file identity (package
// filecache), so an unchanged shard is not read again; any write to the file, or another file
// put in its place, makes it verified again.
//
// # Crash safety and resume protocol
//
// Every file is written under a temporary name in the same directory (shard-NNNNN.arrow.tmp,
// manifest.json.tmp), flushed, fsynced, renamed to its final name, and the directory is fsynced
// (package atomicfile, with these fixed temporary names, which resume recognises).
// The manifest is the single source of truth: a shard exists, as far as readers and resume are
// concerned, only once the manifest lists it. The writer finishes shard N in this order:
//
//  1. write shard-N.arrow.tmp, computing its SHA-256 while writing; fsync; close
//  2. rename to shard-N.arrow; fsync the directory
//  3. write manifest.json.tmp listing shard N; fsync; rename to manifest.json; fsync the directory
//
// The kill points and what [OpenForResume] does about each:
//
//   - killed during 1: shard-N.arrow.tmp is left over; it is deleted and the samples that were
//     in it are regenerated (they are not in the manifest, so not reported as done).
//   - killed between 2 and 3: shard-N.arrow exists but is not listed; it is deleted and its
//     samples are regenerated. Adopting it would be possible but deleting is simpler to reason
//     about and costs only one shard of work.
//   - killed during 3: manifest.json.tmp is left over and manifest.json still holds the previous
//     version (rename is atomic); the temporary file is deleted and the case reduces to the
//     previous one.
//   - a listed shard that is missing, has another size or another SHA-256 is an error naming the
//     file: that is corruption or tampering, not a crash, and is never repaired silently.
//
// The manifest carries its own checksum, "sha256" ([ManifestSHA256]: the SHA-256 of its other
// fields as canonical JSON), which [ReadManifest] verifies: a damaged manifest is an error naming
// it, since one flipped bit of a setting (the temperature) would change what is trained. A
// manifest written before the checksum is read without one ([Manifest.Checksummed] is false; a
// resume writes it back with one). Every manifest must also agree with itself where it records a
// value twice: totals and bytes_per_token against the shards, and the fields drafter distill and
// capture repeat in args (model fingerprint, hashes, seed, layers, dtype, the sampling settings
// of the generation block, the generator's API and token-id source).
//
// [Create] writes a manifest with no shards before any sample, so an interrupted capture can
// always be resumed and its arguments compared. [OpenForResume] refuses to continue when the
// arguments recorded in the manifest differ from the new ones, listing each difference.
// The manifest field "complete" becomes true only when [Writer.Close] succeeds; [OpenDataset]
// refuses incomplete captures.
//
// Samples should be generated from (seed, sample id) rather than from one running random
// stream, so that a resumed capture produces the same samples as an uninterrupted one.
//
// Two processes must not write into the same directory at the same time. This package does
// not lock the directory; its callers do (drafter distill and capture hold the folder's lock,
// package outlock, for the whole run).
package capture
