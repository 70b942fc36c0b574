// auth.cc — HMAC-SHA256 proofs and key derivation for the PSK handshake.
#include "control/auth.h"

#include <sodium.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace ringfire::control {
namespace {

// Hmac accumulates HMAC-SHA256(psk, label || parts...).
class Hmac {
 public:
  Hmac(const Psk& psk, std::string_view label) {
    crypto_auth_hmacsha256_init(&state_, psk.key.data(), psk.key.size());
    add(proto::ConstBytes(reinterpret_cast<const std::byte*>(label.data()), label.size()));
  }
  Hmac& add(proto::ConstBytes b) {
    crypto_auth_hmacsha256_update(&state_, reinterpret_cast<const unsigned char*>(b.data()), b.size());
    return *this;
  }
  Proof done() {
    Proof out;
    crypto_auth_hmacsha256_final(&state_, reinterpret_cast<unsigned char*>(out.data()));
    return out;
  }

 private:
  crypto_auth_hmacsha256_state state_;
};

dataplane::MacKey first_bytes(const Proof& p) {
  dataplane::MacKey k;
  std::memcpy(k.bytes.data(), p.data(), k.bytes.size());
  return k;
}

}  // namespace

absl::StatusOr<Psk> load_psk(const std::string& path) {
  if (sodium_init() < 0) return absl::InternalError("libsodium did not initialise");
  struct stat st{};
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat("--psk-file ", path, ": ", std::strerror(errno)));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "--psk-file ", path, " is readable by others (mode ", absl::Hex(st.st_mode & 0777),
        "): chmod 600 ", path));
  }
  if (st.st_size > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("--psk-file ", path, " is over 4096 bytes: not a key file?"));
  }
  Psk psk;
  psk.key.resize(static_cast<size_t>(st.st_size));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  const ssize_t got = fd < 0 ? -1 : ::read(fd, psk.key.data(), psk.key.size());
  if (fd >= 0) ::close(fd);
  if (got != st.st_size) {
    return absl::PermissionDeniedError(absl::StrCat("--psk-file ", path, ": cannot read it"));
  }
  while (!psk.key.empty() && (psk.key.back() == '\n' || psk.key.back() == '\r')) psk.key.pop_back();
  if (psk.key.size() < 32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--psk-file ", path, " holds ", psk.key.size(),
        " bytes; a key needs at least 32 (make one with: openssl rand -hex 32 > ", path, ")"));
  }
  return psk;
}

Nonce random_nonce() {
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

Proof source_proof(const Psk& psk, proto::ConstBytes hello_frame, const Nonce& source_nonce,
                   const Nonce& salt) {
  return Hmac(psk, "ringfire/1 source").add(hello_frame).add(source_nonce).add(salt).done();
}

Proof mirror_proof(const Psk& psk, proto::ConstBytes hello_frame, proto::ConstBytes auth_frame) {
  return Hmac(psk, "ringfire/1 mirror").add(hello_frame).add(auth_frame).done();
}

Proof node_accept_proof(const Psk& psk, proto::ConstBytes connector_node, const Nonce& acceptor_nonce) {
  return Hmac(psk, "ringfire/1 node-accept").add(connector_node).add(acceptor_nonce).done();
}

Proof node_connect_proof(const Psk& psk, proto::ConstBytes connector_node, proto::ConstBytes acceptor_node) {
  return Hmac(psk, "ringfire/1 node-connect").add(connector_node).add(acceptor_node).done();
}

bool proofs_equal(const Proof& a, const Proof& b) {
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

dataplane::MacKey data_key(const Psk& psk, const Nonce& salt) {
  return first_bytes(Hmac(psk, "ringfire/1 data").add(salt).done());
}

dataplane::MacKey punch_key(const Psk& psk, const Nonce& mirror_nonce, const Nonce& source_nonce) {
  return first_bytes(Hmac(psk, "ringfire/1 punch").add(mirror_nonce).add(source_nonce).done());
}

}  // namespace ringfire::control
