// Reads one drafter capture shard with the Apache Arrow JavaScript library (an
// implementation independent of arrow-go) and prints what it sees as JSON on stdout:
// the file format, schema (names, types, metadata), the fixed columns, and for every
// state column the raw element bits (SHA-256 of the little-endian buffer) and the
// decoded values. capture's Go tests compare this with what they wrote.
//
// Usage: NODE_PATH=scripts/arrowjs/node_modules node read_shard.cjs shard-00000.arrow
"use strict";
const fs = require("fs");
const path = require("path");
const crypto = require("crypto");
const arrow = require("apache-arrow");

const buf = fs.readFileSync(process.argv[2]);
const reader = arrow.RecordBatchReader.from(buf);
reader.open();
const isFile = reader.isFile();
const table = new arrow.Table(reader.readAll());

const out = {
  arrow_js_version: JSON.parse(fs.readFileSync(path.join(path.dirname(require.resolve("apache-arrow")), "package.json"))).version,
  format: isFile ? "file" : "stream",
  batches: table.batches.length,
  rows: table.numRows,
  schema_metadata: Object.fromEntries(table.schema.metadata),
  fields: table.schema.fields.map((f) => ({
    name: f.name,
    type: String(f.type),
    nullable: f.nullable,
    list_size: f.type.listSize === undefined ? null : f.type.listSize,
    child_type: f.type.children && f.type.children.length ? String(f.type.children[0].type) : null,
    metadata: Object.fromEntries(f.metadata),
  })),
  columns: {},
  states: {},
};

for (const name of ["sample_id", "position", "token_id"]) {
  out.columns[name] = Array.from(table.getChild(name), (v) => Number(v));
}
out.columns.loss_mask = Array.from(table.getChild("loss_mask"), (v) => (v ? 1 : 0));

for (const f of table.schema.fields.slice(4)) {
  const vec = table.getChild(f.name);
  // Raw bits: the child value buffers of every batch, in order.
  const h = crypto.createHash("sha256");
  for (const d of vec.data) {
    const c = d.children[0];
    const size = d.type.listSize;
    const vals = c.values.subarray((c.offset + d.offset * size), (c.offset + (d.offset + d.length) * size));
    h.update(Buffer.from(vals.buffer, vals.byteOffset, vals.byteLength));
  }
  // Decoded values, through Arrow JS's own float16/float32 decoding.
  const decoded = [];
  for (let i = 0; i < vec.length; i++) {
    for (const x of vec.get(i)) decoded.push(x);
  }
  out.states[f.name] = { sha256: h.digest("hex"), values: decoded };
}

process.stdout.write(JSON.stringify(out));
