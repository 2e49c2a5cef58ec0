// graph.h: stream capture and CUDA graphs for the stand-in libcuda.so.1,
// included by cuda.cc after its internals (the lock, the arena, the handles)
// and before its entry points, which call the hooks below.
//
// cuStreamBeginCapture_v2 puts a stream in capture: the kernels, copies and
// memsets enqueued on it (and the stand-in cuBLAS's GEMMs, through
// drafter_standin_get_capture) are recorded as the graph's nodes instead of
// run, each kernel's parameter values copied as they are at the launch (a
// pointer parameter is recorded, not what it points to: a value that changes
// per replay must live in device memory, as on a GPU). cuStreamEndCapture
// returns the graph; cuGraphInstantiateWithFlags makes an executable copy and
// cuGraphLaunch runs its nodes in order, synchronously like every stand-in
// stream operation. What a real driver rejects during a capture is rejected
// here with its errors:
//   - synchronizing the capturing stream (or the context), and in
//     CU_STREAM_CAPTURE_MODE_GLOBAL or _THREAD_LOCAL an allocation, a free,
//     pinning host memory: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the
//     capture is invalidated;
//   - a copy between the device and pageable (not cuMemHostAlloc'ed) host
//     memory on the capturing stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
//     invalidating it (the host side of a captured copy is read at replay);
//   - any work on an invalidated capture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED,
//     and cuStreamEndCapture then returns that error and no graph;
//   - capturing the legacy NULL stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
//     beginning a capture twice or ending one never begun: CUDA_ERROR_ILLEGAL_STATE.
// A replay checks again that every copy and memset lies in a live
// allocation (CUDA_ERROR_ILLEGAL_ADDRESS otherwise: the memory was freed
// after the capture).
#ifndef DRAFTER_STANDIN_GRAPH_H
#define DRAFTER_STANDIN_GRAPH_H

namespace {

enum : CUresult {
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
};

enum { CAPTURE_MODE_GLOBAL = 0, CAPTURE_MODE_THREAD_LOCAL = 1, CAPTURE_MODE_RELAXED = 2 };

// Node is one recorded operation.
struct Node {
  enum Kind { KERNEL, HTOD, DTOH, DTOD, MEMSET8, MEMSET32, HOST } kind;
  // KERNEL: the function, its launch shape and its parameters' values (each
  // at an 8-byte aligned offset of args).
  Function* fn = nullptr;
  unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0}, shared = 0;
  std::vector<unsigned long long> args;
  std::vector<size_t> argOff;
  // The copies and memsets: device addresses, host pointers, sizes, value.
  CUdeviceptr dst = 0, src = 0;
  void* hdst = nullptr;
  const void* hsrc = nullptr;
  size_t n = 0;
  unsigned value = 0;
  // HOST: a stand-in library's recorded work (a cuBLAS GEMM); run at replay
  // without the lock, drop when the last graph holding it goes.
  std::shared_ptr<void> host;
  void (*run)(void*) = nullptr;
};

struct Graph {
  std::vector<Node> nodes;
};
struct GraphExec {
  std::vector<Node> nodes;
  unsigned long long launches = 0;
};

// Capture is a stream's capture in progress.
struct Capture {
  int mode;
  std::thread::id thread;
  bool invalid = false;
  Graph* graph;
};

std::map<Stream*, Capture> captures;
std::set<Graph*> graphs;
std::set<GraphExec*> execs;

// capturing returns s's capture, or null.
Capture* capturing(void* s) {
  auto it = captures.find(static_cast<Stream*>(s));
  return it == captures.end() ? nullptr : &it->second;
}

// unsafeDuringCapture reports whether a call that a capture in global (or,
// on this thread, thread-local) mode forbids may run now; when it may not,
// it invalidates those captures, as the driver does.
bool unsafeDuringCapture() {
  bool bad = false;
  for (auto& c : captures) {
    Capture& cp = c.second;
    if (cp.mode == CAPTURE_MODE_GLOBAL || (cp.mode == CAPTURE_MODE_THREAD_LOCAL && cp.thread == std::this_thread::get_id())) {
      cp.invalid = true;
      bad = true;
    }
  }
  return bad;
}

// pinned reports whether p lies in memory cuMemHostAlloc returned (the only
// host memory a captured copy may use: the host side is read at replay).
bool pinned(const void* p) {
  auto it = hostAllocs.upper_bound(const_cast<void*>(p));
  if (it == hostAllocs.begin()) return false;
  --it;
  const char* base = static_cast<const char*>(*it);
  return static_cast<const char*>(p) < base + malloc_usable_size(*it);
}

// record appends n to s's capture, or returns the error of a capture
// invalidated before.
CUresult record(Capture* c, Node n) {
  if (c->invalid) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  c->graph->nodes.push_back(std::move(n));
  return CUDA_SUCCESS;
}

// recordKernel records a launch, copying each parameter's value.
CUresult recordKernel(Capture* c, Function* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                      unsigned bz, unsigned shared, void** params) {
  Node n;
  n.kind = Node::KERNEL;
  n.fn = f;
  n.grid[0] = gx, n.grid[1] = gy, n.grid[2] = gz;
  n.block[0] = bx, n.block[1] = by, n.block[2] = bz;
  n.shared = shared;
  size_t words = 0;
  for (int i = 0; i < f->kernel->nparams; i++) {
    n.argOff.push_back(words);
    words += ((size_t)f->kernel->paramBytes[i] + 7) / 8;
  }
  n.args.assign(words, 0);
  for (int i = 0; i < f->kernel->nparams; i++)
    memcpy(&n.args[n.argOff[i]], params[i], (size_t)f->kernel->paramBytes[i]);
  return record(c, std::move(n));
}

// copyNode is a recorded copy or memset.
Node copyNode(Node::Kind k, CUdeviceptr dst, CUdeviceptr src, void* hdst, const void* hsrc, size_t n, unsigned v) {
  Node x;
  x.kind = k;
  x.dst = dst, x.src = src, x.hdst = hdst, x.hsrc = hsrc, x.n = n, x.value = v;
  return x;
}

// replayNode runs one node (mu held, arena closed).
CUresult replayNode(const Node& n) {
  switch (n.kind) {
    case Node::KERNEL: {
      std::vector<void*> params(n.argOff.size());
      std::vector<unsigned long long> vals(n.args);
      for (size_t i = 0; i < params.size(); i++) params[i] = &vals[n.argOff[i]];
      if (!functions.count(n.fn)) return CUDA_ERROR_INVALID_HANDLE;
      arenaOpen();
      n.fn->kernel->launch(n.grid[0], n.grid[1], n.grid[2], n.block[0], n.block[1], n.block[2], n.shared, params.data());
      arenaClose();
      return CUDA_SUCCESS;
    }
    case Node::HTOD:
      if (!inAllocation(n.dst, n.n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
      return copy(host(n.dst), n.hsrc, n.n);
    case Node::DTOH:
      if (!inAllocation(n.src, n.n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
      return copy(n.hdst, host(n.src), n.n);
    case Node::DTOD:
      if (!inAllocation(n.dst, n.n) || !inAllocation(n.src, n.n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
      return copy(host(n.dst), host(n.src), n.n);
    case Node::MEMSET8:
      if (!inAllocation(n.dst, n.n)) return CUDA_ERROR_ILLEGAL_ADDRESS;
      arenaOpen();
      memset(host(n.dst), (int)n.value, n.n);
      arenaClose();
      return CUDA_SUCCESS;
    case Node::MEMSET32: {
      if (!inAllocation(n.dst, n.n * 4)) return CUDA_ERROR_ILLEGAL_ADDRESS;
      arenaOpen();
      unsigned* p = static_cast<unsigned*>(host(n.dst));
      for (size_t i = 0; i < n.n; i++) p[i] = n.value;
      arenaClose();
      return CUDA_SUCCESS;
    }
    case Node::HOST:
      break;  // run by the caller, without the lock
  }
  return CUDA_SUCCESS;
}

// captureHost records a stand-in library's work on stream s (the bridge's
// record): 1 when s is capturing and the work was recorded, 0 when it is not
// capturing (the caller runs the work now), or minus the CUresult of an
// invalidated capture.
int captureHost(void* s, void (*run)(void*), void* arg, void (*drop)(void*)) {
  std::lock_guard<std::mutex> l(mu);
  Capture* c = capturing(s);
  if (!c) return 0;
  Node n;
  n.kind = Node::HOST;
  n.run = run;
  n.host = std::shared_ptr<void>(arg, drop);
  CUresult r = record(c, std::move(n));
  return r ? -r : 1;
}

int captureActive(void* s) {
  std::lock_guard<std::mutex> l(mu);
  return capturing(s) != nullptr;
}

}  // namespace

// drafter_standin_get_capture gives the stand-in cuBLAS the capture state of
// this libcuda's streams (a separate table from the bridge, so that the
// bridge's version stays).
API const struct drafter_standin_capture* drafter_standin_get_capture(void) {
  static const struct drafter_standin_capture c = {DRAFTER_STANDIN_CAPTURE_VERSION, captureActive, captureHost};
  return &c;
}

// ---------------------------------------------------------------- capture and graphs

API CUresult cuStreamBeginCapture_v2(void* s, int mode) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (mode < CAPTURE_MODE_GLOBAL || mode > CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  if (s == nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream cannot capture
  if (!validStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  if (capturing(s)) return CUDA_ERROR_ILLEGAL_STATE;
  Graph* g = new Graph;
  captures[static_cast<Stream*>(s)] = Capture{mode, std::this_thread::get_id(), false, g};
  return CUDA_SUCCESS;
}

API CUresult cuStreamEndCapture(void* s, void** graph) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  *graph = nullptr;
  if (!validStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  Capture* c = capturing(s);
  if (!c) return CUDA_ERROR_ILLEGAL_STATE;
  Graph* g = c->graph;
  bool invalid = c->invalid;
  captures.erase(static_cast<Stream*>(s));
  if (invalid) {
    delete g;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  graphs.insert(g);
  *graph = g;
  return CUDA_SUCCESS;
}

// cuStreamIsCapturing: status 0 none, 1 active, 2 invalidated.
API CUresult cuStreamIsCapturing(void* s, int* status) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  if (!validStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  Capture* c = capturing(s);
  *status = c ? (c->invalid ? 2 : 1) : 0;
  return CUDA_SUCCESS;
}

API CUresult cuGraphGetNodes(void* graph, void** nodes, size_t* count) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Graph* g = static_cast<Graph*>(graph);
  if (!graphs.count(g)) return CUDA_ERROR_INVALID_HANDLE;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  if (nodes) {
    for (size_t i = 0; i < *count && i < g->nodes.size(); i++) nodes[i] = &g->nodes[i];
  }
  *count = g->nodes.size();
  return CUDA_SUCCESS;
}

API CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long flags) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (!exec || flags > 0xf) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = static_cast<Graph*>(graph);
  if (!graphs.count(g)) return CUDA_ERROR_INVALID_HANDLE;
  GraphExec* e = new GraphExec{g->nodes, 0};
  execs.insert(e);
  *exec = e;
  return CUDA_SUCCESS;
}

API CUresult cuGraphLaunch(void* exec, void* s) {
  std::unique_lock<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  GraphExec* e = static_cast<GraphExec*>(exec);
  if (!execs.count(e) || !validStream(s)) return CUDA_ERROR_INVALID_HANDLE;
  // Launching a graph into a capture would nest it; drafter never does, and
  // the stand-in refuses rather than pretend.
  if (Capture* c = capturing(s)) {
    c->invalid = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  e->launches++;
  for (const Node& n : e->nodes) {
    if (n.kind == Node::HOST) {
      std::shared_ptr<void> keep = n.host;
      l.unlock();
      n.run(keep.get());
      l.lock();
      continue;
    }
    if (CUresult r = replayNode(n)) return r;
  }
  return CUDA_SUCCESS;
}

API CUresult cuGraphExecDestroy(void* exec) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  GraphExec* e = static_cast<GraphExec*>(exec);
  if (!execs.erase(e)) return CUDA_ERROR_INVALID_HANDLE;
  delete e;
  return CUDA_SUCCESS;
}

API CUresult cuGraphDestroy(void* graph) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  Graph* g = static_cast<Graph*>(graph);
  if (!graphs.erase(g)) return CUDA_ERROR_INVALID_HANDLE;
  delete g;
  return CUDA_SUCCESS;
}

#endif  // DRAFTER_STANDIN_GRAPH_H
