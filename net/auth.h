// auth.h — the pre-shared-key handshake's cryptography (HMAC-SHA256 from
// libsodium): loading the key file, the two proofs a HELLO exchange
// carries, and the keys derived from it for the datagram MAC. The byte
// layout of every input is in proto/PROTOCOL.md §1.8. Setup and control
// thread only; the datagram MAC itself is net/datagram_mac.h.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "net/datagram_mac.h"
#include "net/frame_mac.h"
#include "proto/frame.h"

namespace ringfire::net {

// Psk is the pre-shared key: the key file's bytes (trailing newlines cut).
struct Psk {
  std::vector<unsigned char> key;
};

// load_psk reads a key file: at least 32 bytes, readable by its owner only.
absl::StatusOr<Psk> load_psk(const std::string& path);
// write_new_psk writes a fresh key file load_psk accepts: 32 bytes from the
// kernel's CSPRNG as 64 hex digits and a newline, mode 600, synced. An
// existing file is an error unless `replace` (then the new key takes its
// place by rename: no moment with a half-written key).
absl::Status write_new_psk(const std::string& path, bool replace);

using Nonce = std::array<std::byte, proto::kNonceBytes>;
using Proof = std::array<std::byte, proto::kProofBytes>;

// random_nonce: 32 bytes from the kernel's CSPRNG.
Nonce random_nonce();
// random_tag: a non-zero 64-bit datagram tag from the same CSPRNG (an
// unkeyed session's TAG frame, PROTOCOL.md §1.8.1).
uint64_t random_tag();

// source_proof proves to the mirror that the source holds the key and saw
// exactly `hello_frame` (its 16-byte header and body); it covers the AUTH
// step-1 flags too when any is set (§1.8.2: the frame-MAC answer).
Proof source_proof(const Psk& psk, proto::ConstBytes hello_frame, const Nonce& source_nonce,
                   const Nonce& salt, uint8_t auth_flags = 0);
// mirror_proof proves to the source that the mirror holds the key, over
// the HELLO and the source's AUTH frame as sent.
Proof mirror_proof(const Psk& psk, proto::ConstBytes hello_frame, proto::ConstBytes auth_frame);
// node_accept_proof proves to a connecting stream-mux node that the
// accepting node holds the key, over the connector's NODE frame as received
// and the acceptor's nonce (§5.1); node_connect_proof answers it, over both
// NODE frames (header and body) as exchanged.
// It covers the answer's flags when they grant the frame MAC (bit 3).
Proof node_accept_proof(const Psk& psk, proto::ConstBytes connector_node, const Nonce& acceptor_nonce,
                        uint16_t acceptor_flags = 0);
Proof node_connect_proof(const Psk& psk, proto::ConstBytes connector_node, proto::ConstBytes acceptor_node);
// proofs_equal compares in constant time.
bool proofs_equal(const Proof& a, const Proof& b);

// data_key keys every UDP datagram of one source incarnation (one salt per
// serve process, shared by all its mirrors: multicast has one datagram for
// all of them).
MacKey data_key(const Psk& psk, const Nonce& salt);
// punch_key keys one mirror connection's PUNCHes.
MacKey punch_key(const Psk& psk, const Nonce& mirror_nonce, const Nonce& source_nonce);

// mirror_frame_keys: a keyed mirroring connection's frame MAC keys (§1.8.2),
// over its HELLO, AUTH step-1 and step-2 frames as exchanged; `source`
// picks this side's view (its send key is the source's direction).
FrameKeys mirror_frame_keys(const Psk& psk, proto::ConstBytes hello_frame, proto::ConstBytes auth1_frame,
                            proto::ConstBytes auth2_frame, bool source);
// node_frame_keys: a keyed stream-mux connection's (§5.1.1), over the
// connector's NODE, the acceptor's NODE and the AUTH step-3 frame.
FrameKeys node_frame_keys(const Psk& psk, proto::ConstBytes connector_node, proto::ConstBytes acceptor_node,
                          proto::ConstBytes auth3_frame, bool connector);

}  // namespace ringfire::net
