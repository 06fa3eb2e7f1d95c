// The UCX (UCP) implementation of the transfer interface. Transports come from UCX's own
// environment (UCX_TLS: tcp, posix/sysv/cma shared memory, rc/dc verbs where present); the
// `transports` options override it per engine (tests run both tcp and shared memory in one
// process). Senders reach the receiver through its listener, whose connection manager (UCX's
// tcp sockcm) needs tcp on the listening interface: keep `tcp` in UCX_TLS even for shared
// memory ("posix,sysv,cma,self,tcp"; UCX still picks the shared-memory lanes between processes
// on one host when peer_error_handling is off).
//
// Protocol (docs/design.md §3.4; transfer/README.md): the receiver maps the pool's K and V arrays once
// (ucp_mem_map) and packs their rkeys into every descriptor. The sender connects to the
// receiver's listener (one cached endpoint per address), sends kBegin, ships rows as one
// operation per run of rows contiguous in the pool (whole blocks, merged across adjacent block
// ids; UcxRowPath: one-sided put, or an active message the receiver fetches into the blocks),
// sends the state blob as the data of a kState active message, and on commit waits for its
// operations, flushes the endpoint (remote completion), sends kCommit and waits for kAck.
// Wire formats: transfer/messages.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "handoff/block_pool.h"
#include "handoff/state_blob.h"
#include "transfer/transport.h"

namespace yoco {

struct UcxReceiverOptions {
  // The model this worker runs, as plain numbers (model/state.h: state_shape(config)): commits
  // from another model and state blobs of other shapes are refused.
  uint64_t fingerprint = 0;
  StateShape state_shape;
  int64_t max_rows = 0;  // longest sequence a reservation may hold (the model's max_seq_len)
  std::string listen_host = "0.0.0.0";
  int listen_port = 0;         // 0: any free port (see KvReceiver::address())
  std::string advertise_host;  // host in descriptors; empty: listen_host, or the hostname for a wildcard
  std::string transports;      // non-empty: UCX_TLS for this engine only
  int64_t max_state_bytes = int64_t{1} << 30;
  bool verify_rows = true;  // recompute the K/V row checksum from the pool at commit (when sent)
  // That pass runs on up to verify_threads threads (the progress thread and helpers), one per
  // verify_bytes_per_thread of rows: nothing else can overlap it (bench/README.md).
  int verify_threads = 2;
  int64_t verify_bytes_per_thread = int64_t{2} << 20;
  // UCP_ERR_HANDLING_MODE_PEER on accepted endpoints: a dead sender fails its reservations at
  // once. UCX 1.13 selects no shared-memory lane (posix/sysv/cma) for such endpoints, so turn it
  // off (here and in the senders) to move data over shared memory; dead senders are then found
  // by their leases.
  bool peer_error_handling = true;
  int max_connections = 1024;
  size_t max_tombstones = 4096;  // failed reservations remembered for late callers
  // Accept one-sided writes (UcxRowPath::kPush): the pool's rkeys go into every descriptor and
  // any UCX peer holding them can write any block, which no secret can gate (docs/design.md
  // §4.4). Off: no rkeys are handed out and the context has no RMA feature, so rows land only
  // through the checked pull path. For benchmarks and trusted fabrics only.
  bool allow_push = false;
};

// The pool must outlive the receiver; its rows must be state_shape.kv_dim wide.
Result<std::unique_ptr<KvReceiver>> make_ucx_receiver(KvBlockPool& pool, const UcxReceiverOptions& options);

// How rows travel. kPush: one-sided ucp_put_nbx into the reserved blocks with the descriptor's
// rkeys (true RMA on rc/dc; over UCX 1.13 shared memory it falls back to active-message
// emulation, because its put lanes (posix/sysv) reach only memory UCX allocated itself). kPull:
// one active message per contiguous run; the receiver checks the reservation and the range,
// then fetches the data straight into the blocks (rendezvous: a cma or RDMA read, or the tcp
// stream), so nothing lands in blocks that were freed meanwhile.
enum class UcxRowPath { kPush, kPull };

struct UcxSenderOptions {
  uint64_t fingerprint = 0;                        // this worker's model; a descriptor for another model is refused
  std::string transports;                          // non-empty: UCX_TLS for this engine only
  bool peer_error_handling = true;                 // as UcxReceiverOptions::peer_error_handling; keep both alike
  std::chrono::milliseconds op_timeout{30000};     // bound on waits inside put_rows / put_state
  int64_t max_staging_bytes = int64_t{512} << 20;  // staged rows in flight before put_rows waits
  bool row_checksums = true;  // checksum the staged rows for the receiver's check (one pass over the data)
  UcxRowPath row_path = UcxRowPath::kPull;  // measured faster over tcp and shm here: bench/README.md
};

Result<std::unique_ptr<KvSender>> make_ucx_sender(const UcxSenderOptions& options);

}  // namespace yoco
