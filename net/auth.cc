// auth.cc — HMAC-SHA256 proofs and key derivation for the PSK handshake.
#include "net/auth.h"

#include <sodium.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ringfire::net {
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

MacKey first_bytes(const Proof& p) {
  MacKey k;
  std::memcpy(k.bytes.data(), p.data(), k.bytes.size());
  return k;
}

}  // namespace

absl::StatusOr<Psk> load_psk(const std::string& path) {
  if (sodium_init() < 0) return absl::InternalError("libsodium did not initialise");
  // Opened without waiting (a named pipe would block the open for good,
  // helper-46), then judged by what was opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("--psk-file ", path, ": ", std::strerror(errno)));
  struct stat st{};
  auto give_up = [&](absl::Status why) {
    ::close(fd);
    return why;
  };
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return give_up(absl::InvalidArgumentError(absl::StrCat(
        "--psk-file ", path, " is not a regular file (a directory, device or pipe): give the key file ringfire keygen wrote")));
  }
  if ((st.st_mode & 077) != 0) {
    return give_up(absl::PermissionDeniedError(absl::StrCat("--psk-file ", path, " is readable by others (mode ",
                                                           absl::StrFormat("%03o", st.st_mode & 0777), "): chmod 600 ", path)));
  }
  if (st.st_size > 4096) {
    return give_up(absl::InvalidArgumentError(absl::StrCat("--psk-file ", path, " is over 4096 bytes: not a key file?")));
  }
  Psk psk;
  psk.key.resize(static_cast<size_t>(st.st_size));
  const ssize_t got = ::read(fd, psk.key.data(), psk.key.size());
  ::close(fd);
  if (got != st.st_size) {
    return absl::PermissionDeniedError(absl::StrCat("--psk-file ", path, ": cannot read it"));
  }
  while (!psk.key.empty() && (psk.key.back() == '\n' || psk.key.back() == '\r')) psk.key.pop_back();
  if (psk.key.size() < 32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--psk-file ", path, " holds ", psk.key.size(),
        " bytes; a key needs at least 32 (make one with: ringfire keygen ", path, ")"));
  }
  return psk;
}

absl::Status write_new_psk(const std::string& path, bool replace) {
  if (sodium_init() < 0) return absl::InternalError("libsodium did not initialise");
  std::array<unsigned char, 32> raw{};
  randombytes_buf(raw.data(), raw.size());
  std::array<char, 2 * raw.size() + 1> text{};
  sodium_bin2hex(text.data(), text.size(), raw.data(), raw.size());
  sodium_memzero(raw.data(), raw.size());
  text.back() = '\n';  // bin2hex's terminator: the file ends in a newline (not part of the key)
  // --force replaces a key file, never anything else (a rename over
  // /dev/null made it a file, helper-46).
  if (struct stat st{}; ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file (a device, pipe, directory or link): "
                                                         "left as it is; give the key file's own path"));
  }
  const std::string tmp = replace ? absl::StrCat(path, ".new-", getpid()) : path;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    return e == EEXIST ? absl::AlreadyExistsError(absl::StrCat(
                             path, " exists: keep it, or replace it with --force (every peer needs the new key)"))
                       : absl::PermissionDeniedError(absl::StrCat("cannot create ", tmp, ": ", std::strerror(e)));
  }
  const bool ok = ::fchmod(fd, 0600) == 0 &&
                  ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  sodium_memzero(text.data(), text.size());
  if (!ok || (replace && ::rename(tmp.c_str(), path.c_str()) != 0)) {
    const int e2 = ok ? errno : e;
    ::unlink(tmp.c_str());
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path, ": ", std::strerror(e2)));
  }
  return absl::OkStatus();
}

Nonce random_nonce() {
  Nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

uint64_t random_tag() {
  uint64_t t = 0;
  while (t == 0) randombytes_buf(&t, sizeof(t));
  return t;
}

Proof source_proof(const Psk& psk, proto::ConstBytes hello_frame, const Nonce& source_nonce,
                   const Nonce& salt, uint8_t auth_flags) {
  Hmac h(psk, "ringfire/1 source");
  h.add(hello_frame).add(source_nonce).add(salt);
  // The step-1 flags, when any is set (an older source's proof is unchanged):
  // a man in the middle that clears the frame-MAC bit breaks the proof.
  const std::byte flags{auth_flags};
  if (auth_flags != 0) h.add({&flags, 1});
  return h.done();
}

Proof mirror_proof(const Psk& psk, proto::ConstBytes hello_frame, proto::ConstBytes auth_frame) {
  return Hmac(psk, "ringfire/1 mirror").add(hello_frame).add(auth_frame).done();
}

Proof node_accept_proof(const Psk& psk, proto::ConstBytes connector_node, const Nonce& acceptor_nonce,
                        uint16_t acceptor_flags) {
  Hmac h(psk, "ringfire/1 node-accept");
  h.add(connector_node).add(acceptor_nonce);
  // The answer's flags, when it grants the frame MAC (bit 3; an older
  // acceptor's proof is unchanged): clearing the bit breaks the proof.
  if ((acceptor_flags & proto::kNodeFrameMac) != 0) {
    const std::byte le[2] = {std::byte(acceptor_flags & 0xff), std::byte(acceptor_flags >> 8)};
    h.add({le, 2});
  }
  return h.done();
}

Proof node_connect_proof(const Psk& psk, proto::ConstBytes connector_node, proto::ConstBytes acceptor_node) {
  return Hmac(psk, "ringfire/1 node-connect").add(connector_node).add(acceptor_node).done();
}

bool proofs_equal(const Proof& a, const Proof& b) {
  return sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

MacKey data_key(const Psk& psk, const Nonce& salt) {
  return first_bytes(Hmac(psk, "ringfire/1 data").add(salt).done());
}

MacKey punch_key(const Psk& psk, const Nonce& mirror_nonce, const Nonce& source_nonce) {
  return first_bytes(Hmac(psk, "ringfire/1 punch").add(mirror_nonce).add(source_nonce).done());
}

namespace {

FrameKey frame_key(const Psk& psk, std::string_view label, proto::ConstBytes a, proto::ConstBytes b, proto::ConstBytes c) {
  const Proof p = Hmac(psk, label).add(a).add(b).add(c).done();
  FrameKey k;
  static_assert(sizeof(k.bytes) == sizeof(p));
  std::memcpy(k.bytes.data(), p.data(), k.bytes.size());
  return k;
}

}  // namespace

FrameKeys mirror_frame_keys(const Psk& psk, proto::ConstBytes hello_frame, proto::ConstBytes auth1_frame,
                            proto::ConstBytes auth2_frame, bool source) {
  const FrameKey from_source = frame_key(psk, "ringfire/1 frames source", hello_frame, auth1_frame, auth2_frame);
  const FrameKey from_mirror = frame_key(psk, "ringfire/1 frames mirror", hello_frame, auth1_frame, auth2_frame);
  return source ? FrameKeys{from_source, from_mirror} : FrameKeys{from_mirror, from_source};
}

FrameKeys node_frame_keys(const Psk& psk, proto::ConstBytes connector_node, proto::ConstBytes acceptor_node,
                          proto::ConstBytes auth3_frame, bool connector) {
  const FrameKey from_connector = frame_key(psk, "ringfire/1 frames connector", connector_node, acceptor_node, auth3_frame);
  const FrameKey from_acceptor = frame_key(psk, "ringfire/1 frames acceptor", connector_node, acceptor_node, auth3_frame);
  return connector ? FrameKeys{from_connector, from_acceptor} : FrameKeys{from_acceptor, from_connector};
}

}  // namespace ringfire::net
