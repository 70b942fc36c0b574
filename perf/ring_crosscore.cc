// ring_crosscore.cc — the ring itself used the way a serve and a mirror use
// it, each side on its own CPU: the writer publishes fixed records in
// batches of `batch` at a steady rate (a mirror applying a datagram's
// records), the reader waits (untimed) until a batch is waiting and reads it
// into one frame-sized buffer back to back (a serve filling a frame). Each
// side's time inside its batches, per record, is what the ring costs when
// the lines were last touched by the other core — the figures a serve's and
// a mirror's per-record cost sit on; BM_RingRead and BM_RingPublish run on
// one core, with no other core touching the ring. The reader then publishes
// each batch it read into a second ring of its own (a mirror: records that
// crossed from the other core, written into its ring): "relay" is the read
// and that publish together, per record.
//
//   ring_crosscore [--rate R] [--seconds N] [--size B] [--batch K]
//                  [--writer-cpu C] [--reader-cpu C]
// Prints one JSON object: reader and writer ns per record, records, lost.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "perf/tsc.h"
#include "ring/consumer.h"
#include "ring/producer.h"

namespace ringfire::perf {
namespace {

void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

int run(int argc, char** argv) {
  uint64_t rate = 1'000'000, seconds = 3, size = 64, batch = 22, writer_cpu = 0, reader_cpu = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    uint64_t v = 0;
    if (!absl::SimpleAtoi(argv[i + 1], &v) || v == 0) {
      std::fprintf(stderr, "ring_crosscore: %s wants a positive number, got %s\n", k.c_str(), argv[i + 1]);
      return 2;
    }
    if (k == "--rate") rate = v;
    else if (k == "--seconds") seconds = v;
    else if (k == "--size") size = v;
    else if (k == "--batch") batch = v;
    else if (k == "--writer-cpu") writer_cpu = v;
    else if (k == "--reader-cpu") reader_cpu = v;
    else {
      std::fprintf(stderr, "ring_crosscore: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  ring::RingOptions o;
  o.name = absl::StrCat("rf-crosscore-", getpid());
  o.capacity = 1 << 20;
  o.slot_size = static_cast<uint32_t>(size);
  if (auto f = ring::RingFile::create(o); !f.ok()) {
    std::fprintf(stderr, "ring_crosscore: %s\n", std::string(f.status().message()).c_str());
    return 1;
  }
  auto producer = ring::Producer::attach(*ring::RingFile::open(o.name));
  auto consumer = ring::Consumer::attach(*ring::RingFile::open(o.name), ring::StartPosition::latest());
  (void)ring::RingFile::remove(o.name);  // mapped by both: gone from /dev/shm on every exit path
  ring::RingOptions ro = o;
  ro.name = absl::StrCat("rf-crosscore-relay-", getpid());
  if (auto f = ring::RingFile::create(ro); !f.ok()) {
    std::fprintf(stderr, "ring_crosscore: %s\n", std::string(f.status().message()).c_str());
    return 1;
  }
  auto relay = ring::Producer::attach(*ring::RingFile::open(ro.name));
  (void)ring::RingFile::remove(ro.name);
  if (!producer.ok() || !consumer.ok() || !relay.ok()) return 1;

  const double per_ns = tsc_per_ns();
  const uint64_t total = rate * seconds;
  std::atomic<bool> done{false};
  uint64_t writer_busy = 0;
  std::thread writer([&] {
    pin(static_cast<int>(writer_cpu));
    std::vector<std::byte> recs(batch * size, std::byte{7});
    const uint64_t start = tsc();
    for (uint64_t i = 0; i < total; i += batch) {
      const uint64_t due = start + static_cast<uint64_t>(static_cast<double>(i) * 1e9 / static_cast<double>(rate) * per_ns);
      while (tsc() < due) {
      }
      const uint64_t t0 = tsc();
      for (uint64_t k = 0; k < batch && i + k < total; ++k) producer->publish(recs.data() + k * size);
      writer_busy += tsc() - t0;
    }
    done.store(true, std::memory_order_release);  // pairs with the reader's acquire load below
  });

  pin(static_cast<int>(reader_cpu));
  std::vector<std::byte> frame(batch * size);
  uint64_t busy = 0, relay_busy = 0, read = 0, lost = 0;
  for (;;) {
    const bool last = done.load(std::memory_order_acquire);  // pairs with the writer's release store
    if (consumer->published() - consumer->cursor() < batch && !last) continue;
    const uint64_t t0 = tsc();
    uint64_t n = 0;
    for (; n < batch; ++n) {
      const ring::ReadResult r = consumer->try_read(frame.data() + n * size);
      lost += r.lost;
      if (!r.ok) break;
    }
    const uint64_t t1 = tsc();
    busy += t1 - t0;
    for (uint64_t k = 0; k < n; ++k) relay->publish(frame.data() + k * size);
    relay_busy += tsc() - t1;
    read += n;
    if (last && n == 0) break;
  }
  writer.join();
  const double ns = static_cast<double>(busy) / per_ns / static_cast<double>(read ? read : 1);
  const double wns = static_cast<double>(writer_busy) / per_ns / static_cast<double>(total);
  const double rns = static_cast<double>(busy + relay_busy) / per_ns / static_cast<double>(read ? read : 1);
  std::printf("{\"harness\": \"ring_crosscore\", \"size\": %lu, \"batch\": %lu, \"rate\": %lu, "
              "\"records\": %lu, \"lost\": %lu, \"reader_ns_per_record\": %.2f, \"writer_ns_per_record\": %.2f, "
              "\"relay_ns_per_record\": %.2f}\n",
              size, batch, rate, read, lost, ns, wns, rns);
  return read == total && lost == 0 ? 0 : 3;
}

}  // namespace
}  // namespace ringfire::perf

int main(int argc, char** argv) { return ringfire::perf::run(argc, argv); }
