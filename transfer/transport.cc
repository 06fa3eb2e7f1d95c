#include "transfer/transport.h"

namespace yoco {

namespace {

struct ErrorInfo {
  TransferError error;
  const char* name;
  StatusCode code;
};

constexpr ErrorInfo kErrors[] = {
    {TransferError::kNone, "none", StatusCode::kOk},
    {TransferError::kUnknownReservation, "unknown_reservation", StatusCode::kNotFound},
    {TransferError::kLeaseExpired, "lease_expired", StatusCode::kFailedPrecondition},
    {TransferError::kAborted, "aborted", StatusCode::kFailedPrecondition},
    {TransferError::kCancelled, "cancelled", StatusCode::kFailedPrecondition},
    {TransferError::kFingerprintMismatch, "fingerprint_mismatch", StatusCode::kInvalidArgument},
    {TransferError::kRequestMismatch, "request_mismatch", StatusCode::kInvalidArgument},
    {TransferError::kRowCountMismatch, "row_count_mismatch", StatusCode::kInvalidArgument},
    {TransferError::kRowsIncomplete, "rows_incomplete", StatusCode::kFailedPrecondition},
    {TransferError::kBadChecksum, "bad_checksum", StatusCode::kDataLoss},
    {TransferError::kBadState, "bad_state", StatusCode::kDataLoss},
    {TransferError::kMissingState, "missing_state", StatusCode::kFailedPrecondition},
    {TransferError::kStateTooLarge, "state_too_large", StatusCode::kResourceExhausted},
    {TransferError::kPeerFailed, "peer_failed", StatusCode::kUnavailable},
    {TransferError::kTimeout, "timeout", StatusCode::kUnavailable},
    {TransferError::kAlreadyCommitted, "already_committed", StatusCode::kFailedPrecondition},
    {TransferError::kShutdown, "shutdown", StatusCode::kUnavailable},
    {TransferError::kInvalid, "invalid", StatusCode::kInvalidArgument},
};

const ErrorInfo& info(TransferError e) {
  for (const auto& i : kErrors)
    if (i.error == e) return i;
  return kErrors[sizeof(kErrors) / sizeof(kErrors[0]) - 1];
}

}  // namespace

const char* transfer_error_name(TransferError e) { return info(e).name; }

const char* transfer_refusal_name(TransferRefusal r) {
  switch (r) {
    case TransferRefusal::kBadSecret:
      return "bad_secret";
    case TransferRefusal::kReplay:
      return "replay";
    case TransferRefusal::kOutOfRange:
      return "out_of_range";
    case TransferRefusal::kCount:
      break;
  }
  return "unknown";
}

Status transfer_error(TransferError e, const std::string& detail) {
  const ErrorInfo& i = info(e);
  const StatusCode code = i.code == StatusCode::kOk ? StatusCode::kInternal : i.code;
  return Status(code, std::string("[") + i.name + "] " + detail);
}

TransferError transfer_error_of(const Status& st) {
  if (st.ok()) return TransferError::kNone;
  const std::string& m = st.message();
  if (m.empty() || m[0] != '[') return TransferError::kInvalid;
  const size_t close = m.find(']');
  if (close == std::string::npos) return TransferError::kInvalid;
  const std::string name = m.substr(1, close - 1);
  for (const auto& i : kErrors)
    if (name == i.name) return i.error;
  return TransferError::kInvalid;
}

}  // namespace yoco
