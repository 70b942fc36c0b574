// frame_mac.cc — see frame_mac.h.
#include "net/frame_mac.h"

#include <sodium.h>

#include <cstring>

namespace ringfire::net {

void FrameMac::compute(proto::ConstBytes frame, unsigned char* tag) const {
  unsigned char nonce[crypto_aead_chacha20poly1305_IETF_NPUBBYTES] = {};
  static_assert(sizeof(nonce) == 12);
  for (int i = 0; i < 8; ++i) nonce[4 + i] = static_cast<unsigned char>(counter_ >> (8 * i));
  unsigned long long tag_len = 0;
  unsigned char none[1] = {0};  // no message: nothing is encrypted (the pointers must not be null)
  // Nothing encrypted: the frame is the additional data, the tag is its MAC.
  crypto_aead_chacha20poly1305_ietf_encrypt_detached(none, tag, &tag_len, none, 0,
                                                     reinterpret_cast<const unsigned char*>(frame.data()), frame.size(),
                                                     nullptr, nonce, key_.bytes.data());
}

void FrameMac::seal(proto::ConstBytes frame, std::byte* tag) {
  compute(frame, reinterpret_cast<unsigned char*>(tag));
  ++counter_;
}

bool FrameMac::open(proto::ConstBytes frame, const std::byte* tag) {
  unsigned char want[kFrameTagBytes];
  compute(frame, want);
  if (sodium_memcmp(want, tag, kFrameTagBytes) != 0) return false;
  ++counter_;
  return true;
}

}  // namespace ringfire::net
