// negotiation.cc — the attach answer and the sender's reading of it.
#include "mux/negotiation.h"

#include "absl/strings/str_cat.h"

namespace ringfire::mux {

uint32_t supported_keys(const MuxConfig& local) {
  return proto::kTransportTcp | (local.enabled ? proto::kTransportMux : 0u);
}

proto::AttachResponse answer(const proto::AttachRequest& request, const MuxConfig& local, bool anchor_known) {
  proto::AttachResponse r;
  r.anchor_id = request.anchor_id;
  r.session_id = request.session_id;
  r.transport_key = proto::kTransportTcp;
  if (!anchor_known) {
    r.status = proto::AttachStatus::kUnknownAnchor;
    return r;
  }
  if (local.enabled && (request.supported_keys & proto::kTransportMux) != 0) {
    r.transport_key = proto::kTransportMux;
    r.initial_credit = local.initial_credit;  // never 0: validate() refused it
    r.slot_byte_budget = local.slot_byte_budget;
    r.peer_byte_budget = local.peer_byte_budget;
  }
  return r;
}

absl::StatusOr<PathChoice> choose(const proto::AttachResponse& response, const MuxConfig& local) {
  switch (response.status) {
    case proto::AttachStatus::kOk:
      break;
    case proto::AttachStatus::kUnknownAnchor:
      return absl::NotFoundError(absl::StrCat("anchor ", response.anchor_id, " is not known at the receiver"));
    case proto::AttachStatus::kRefused:
      return absl::PermissionDeniedError(absl::StrCat("the receiver refused the attach to anchor ", response.anchor_id));
  }
  PathChoice c;
  if (response.transport_key == proto::kTransportTcp) return c;
  if (response.transport_key != proto::kTransportMux) {
    return absl::InvalidArgumentError("the receiver chose a transport this build does not speak");
  }
  if (!local.enabled) {
    return absl::FailedPreconditionError("the receiver chose the mux, which this node did not offer");
  }
  if (response.initial_credit == 0) {
    return absl::FailedPreconditionError(
        "the receiver chose the mux with a zero window: refused (a mux receiver must grant credit)");
  }
  c.kind = PathChoice::Kind::kMux;
  c.credit = response.initial_credit;
  c.slot_byte_budget = response.slot_byte_budget != 0 ? response.slot_byte_budget : local.slot_byte_budget;
  c.peer_byte_budget = response.peer_byte_budget != 0 ? response.peer_byte_budget : local.peer_byte_budget;
  return c;
}

}  // namespace ringfire::mux
