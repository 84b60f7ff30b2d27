// goblin: command-line client of goblin-core (libgoblin underneath).
//   goblin --target unix:PATH ping [-c COUNT] [-s SIZE] [-i INTERVAL]
//   goblin --target unix:PATH put KEY FILE|-  [--ttl DURATION] [--meta TEXT]
//   goblin --target unix:PATH get KEY [-o FILE] [--follow]
//   goblin --target unix:PATH head KEY
//   goblin --target unix:PATH del KEY
//   goblin --target unix:PATH pub CHANNEL MESSAGE            (prints the receivers)
//   goblin --target unix:PATH sub [--pattern] [-c N] CHANNEL...  (prints "channel: message")
//   goblin --target etcd://HOST:PORT[/prefix] members               (the live cores in etcd)
// --target ucx://HOST:PORT speaks to goblin-core --rdma-listen instead (the UCX plane);
// --target etcd://HOST:PORT[,HOST:PORT][/prefix] routes put/get/head/del to the key's core
// among those registered in etcd (goblin-core --etcd; rendezvous hashing, libgoblin's Cluster).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <optional>
#include <thread>

#include "goblin/client/cluster.h"
#include "goblin/client/connection.h"
#include "goblin/common/cli.h"
#include "goblin/common/clock.h"
#include "goblin/common/config.h"
#include "goblin/common/fd.h"
#include "goblin/common/signals.h"
#include "goblin/common/units.h"

namespace {

using namespace goblin;

// Progress on a terminal only, at most ten updates a second.
class Progress {
 public:
  Progress(const char* verb, uint64_t total) : verb_(verb), total_(total), tty_(isatty(2) != 0) {}
  void Update(uint64_t done) {
    if (!tty_) return;
    uint64_t now = MonotonicNanos();
    if (now - last_ < 100'000'000 && done != total_) return;
    last_ = now;
    double secs = static_cast<double>(now - start_) / 1e9;
    double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
    if (total_ == 0) {  // size unknown (a stream or a fill in progress)
      std::fprintf(stderr, "\r%s %s %s/s   ", verb_, HumanSize(done).c_str(),
                   HumanSize(static_cast<uint64_t>(rate)).c_str());
      return;
    }
    std::fprintf(stderr, "\r%s %s / %s (%.0f%%) %s/s   ", verb_, HumanSize(done).c_str(),
                 HumanSize(total_).c_str(),
                 100.0 * static_cast<double>(done) / static_cast<double>(total_),
                 HumanSize(static_cast<uint64_t>(rate)).c_str());
  }
  void Done() {
    if (tty_) std::fprintf(stderr, "\n");
  }

 private:
  const char* verb_;
  uint64_t total_;
  bool tty_;

 public:
  static bool Wanted() { return isatty(2) != 0; }

 private:
  uint64_t start_ = MonotonicNanos();
  uint64_t last_ = 0;
};

int Fail(const char* what, const Status& s) {
  std::fprintf(stderr, "goblin: %s: %s\n", what, s.ToString().c_str());
  return 1;
}

VoidResult WriteAll(int fd, std::span<const uint8_t> data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoErr("write", errno);
    data = data.subspan(static_cast<size_t>(n));
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("goblin: command-line client of goblin-core", "goblin");
  app.set_version_flag("--version", GOBLIN_VERSION);
  std::string target = "unix:/run/goblin/core.sock";
  app.add_option("--target", target,
                 "unix:PATH (ring plane), ucx://HOST:PORT, or etcd://HOST:PORT[/prefix] (the "
                 "cores registered there, each key at its owner)")
      ->capture_default_str();
  app.require_subcommand(1);
  auto* ping = app.add_subcommand("ping", "Round trips to the core over the chosen plane");
  int count = 4;
  uint64_t size = 16;
  std::chrono::nanoseconds interval = std::chrono::milliseconds(200);
  ping->add_option("-c,--count", count, "Number of pings")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  AddSizeOption(*ping, "-s,--size", &size, "Payload bytes", /*allow_zero=*/true);
  AddDurationOption(*ping, "-i,--interval", &interval, "Pause between pings");

  std::string key, file, out = "-", meta;
  std::chrono::nanoseconds ttl{0};
  auto* put = app.add_subcommand("put", "Store FILE (or - for stdin) under KEY");
  put->add_option("key", key, "Object key")->required();
  put->add_option("file", file, "File to store, - for standard input")->required();
  AddDurationOption(*put, "--ttl", &ttl, "Expire after this long (0: never)");
  put->add_option("--meta", meta, "Opaque metadata stored with the object");
  auto* get = app.add_subcommand("get", "Fetch KEY into FILE (default: standard output)");
  get->add_option("key", key, "Object key")->required();
  get->add_option("-o,--output", out, "Output file, - for standard output")->capture_default_str();
  bool follow = false;
  get->add_flag("--follow", follow, "If KEY is being stored right now, stream it as it arrives");
  auto* head = app.add_subcommand("head", "Show KEY's size, generation, times and metadata");
  head->add_option("key", key, "Object key")->required();
  auto* del = app.add_subcommand("del", "Delete KEY");
  del->add_option("key", key, "Object key")->required();
  std::string channel, message;
  auto* pub = app.add_subcommand("pub", "PUBLISH MESSAGE on CHANNEL; prints how many received it");
  pub->add_option("channel", channel, "Channel")->required();
  pub->add_option("message", message, "Message")->required();
  std::vector<std::string> channels;
  bool pattern = false;
  int sub_count = 0;
  auto* sub = app.add_subcommand("sub", "SUBSCRIBE to CHANNELs and print what arrives");
  sub->add_option("channels", channels, "Channels (patterns with --pattern)")->required();
  sub->add_flag("--pattern", pattern, "PSUBSCRIBE: the names are glob patterns");
  sub->add_option("-c,--count", sub_count, "Exit after this many messages (0: never)")
      ->capture_default_str();
  auto* members = app.add_subcommand("members", "List the cores registered in etcd (etcd://)");
  std::string owner_key;
  members->add_option("--key", owner_key, "Also say which core owns this key");
  AddLogLevelOption(app);
  if (int rc = ParseCommandLine(app, argc, argv); rc >= 0) return rc;

  const bool fabric = target.starts_with("etcd://");
  if (fabric && ping->parsed()) {
    std::fprintf(stderr, "goblin: ping needs one core (unix: or ucx://), not %s\n", target.c_str());
    return 1;
  }
  if (!fabric && members->parsed()) {
    std::fprintf(stderr, "goblin: members needs an etcd:// target\n");
    return 1;
  }
  std::unique_ptr<client::Connection> conn;
  std::unique_ptr<client::Cluster> cluster;
  {
    Status failed;
    if (fabric) {
      auto cl = client::Cluster::Open(target, {.name = "goblin-cli"});
      if (cl)
        cluster = std::move(*cl);
      else
        failed = cl.error();
    } else {
      auto cn = client::Connection::Open(target, {.name = "goblin-cli"});
      if (cn)
        conn = std::move(*cn);
      else
        failed = cn.error();
    }
    if (!failed.ok()) {
      std::fprintf(stderr, "goblin: cannot connect to %s: %s\n", target.c_str(),
                   failed.ToString().c_str());
      return 1;
    }
  }
  // Object requests go to the one core, or through the cluster to the key's owner.
  auto objects = [&](auto&& fn) { return fabric ? fn(*cluster) : fn(*conn); };
  if (members->parsed()) {
    for (const auto& m : cluster->members()) {
      std::printf("%s %s shards=%u capacity=%s%s%s\n", m.name.c_str(), m.address.c_str(), m.shards,
                  FormatSize(m.capacity).c_str(), m.zone.empty() ? "" : " zone=", m.zone.c_str());
    }
    if (!owner_key.empty())
      std::printf("owner of %s: %s\n", owner_key.c_str(), cluster->OwnerOf(owner_key).c_str());
    return 0;
  }
  if (ping->parsed()) {
    std::string payload(size, 'g');
    std::printf("PING %s: %zu-byte payload, client %llu of core pid %u\n", target.c_str(),
                payload.size(), static_cast<unsigned long long>(conn->client_id()),
                conn->server_pid());
    double min = 1e300, max = 0, sum = 0;
    for (int i = 0; i < count; ++i) {
      auto rtt = conn->Ping(payload);
      if (!rtt) {
        std::fprintf(stderr, "goblin: ping %d: %s\n", i + 1, rtt.error().ToString().c_str());
        return 1;
      }
      double us = static_cast<double>(rtt->count()) / 1000.0;
      min = std::min(min, us);
      max = std::max(max, us);
      sum += us;
      std::printf("pong seq=%d time=%.2f us\n", i + 1, us);
      std::fflush(stdout);
      if (i + 1 < count) std::this_thread::sleep_for(interval);
    }
    std::printf("%d pings: min/avg/max = %.2f/%.2f/%.2f us\n", count, min, sum / count, max);
    return 0;
  }
  if (put->parsed()) {
    UniqueFd fd(file == "-" ? dup(0) : open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return Fail(file.c_str(), ErrnoStatus("open", errno));
    struct stat st {};
    uint64_t total = UINT64_MAX;
    if (fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode)) total = static_cast<uint64_t>(st.st_size);
    Progress progress("put", total == UINT64_MAX ? 0 : total);
    uint64_t sent = 0;
    client::Connection::Source source = [&](std::span<uint8_t> buf) -> Result<size_t> {
      for (;;) {
        ssize_t n = read(fd.get(), buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return ErrnoErr(fmt::format("read({})", file), errno);
        sent += static_cast<uint64_t>(n);
        progress.Update(sent);
        return static_cast<size_t>(n);
      }
    };
    auto gen = objects([&](auto& c) {
      return c.Put(key, source, total, static_cast<uint64_t>(ttl.count()), meta);
    });
    progress.Done();
    if (!gen) return Fail(fmt::format("put {}", key).c_str(), gen.error());
    std::printf("stored %s: %llu bytes, generation %llu\n", key.c_str(),
                static_cast<unsigned long long>(sent), static_cast<unsigned long long>(*gen));
    return 0;
  }
  if (get->parsed()) {
    UniqueFd fd(out == "-" ? dup(1)
                           : open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd) return Fail(out.c_str(), ErrnoStatus("open", errno));
    uint64_t total = 0;
    if (Progress::Wanted()) {  // the size, for the progress line (one more round trip)
      auto h = objects([&](auto& c) { return c.Head(key); });
      if (h && h->found && h->size != UINT64_MAX) total = h->size;
    }
    std::optional<Progress> progress;
    uint64_t expect = 0;
    client::Connection::Sink sink = [&](uint64_t offset,
                                        std::span<const uint8_t> data) -> VoidResult {
      if (offset != expect) return Err(StatusCode::kCorruption, "data out of order at {}", offset);
      GOBLIN_RETURN_IF_ERROR(WriteAll(fd.get(), data));
      expect += data.size();
      if (!progress) progress.emplace("get", total);
      progress->Update(expect);
      return {};
    };
    auto meta_r = objects([&](auto& c) { return c.Get(key, sink, 0, UINT64_MAX, follow); });
    if (progress) progress->Done();
    if (!meta_r) {
      if (out != "-") unlink(out.c_str());
      return Fail(fmt::format("get {}", key).c_str(), meta_r.error());
    }
    if (!meta_r->found) {
      if (out != "-") unlink(out.c_str());
      std::fprintf(stderr, "goblin: %s: not found\n", key.c_str());
      return 2;
    }
    if (meta_r->filling) {
      std::fprintf(stderr, "goblin: %s: streamed from a fill in progress (%llu bytes)\n",
                   key.c_str(), static_cast<unsigned long long>(expect));
    }
    if (meta_r->size != UINT64_MAX && expect != meta_r->size) {
      return Fail(key.c_str(), Status(StatusCode::kIoError, fmt::format("received {} of {} bytes",
                                                                        expect, meta_r->size)));
    }
    return 0;
  }
  if (head->parsed()) {
    auto m = objects([&](auto& c) { return c.Head(key); });
    if (!m) return Fail(fmt::format("head {}", key).c_str(), m.error());
    if (!m->found) {
      std::fprintf(stderr, "goblin: %s: not found\n", key.c_str());
      return 2;
    }
    std::printf(
        "key: %s\nsize: %llu\ngeneration: %llu\ncreated_unix_ns: %llu\nexpires_unix_ns: "
        "%llu\nmetadata: %s\n",
        key.c_str(), static_cast<unsigned long long>(m->size),
        static_cast<unsigned long long>(m->generation),
        static_cast<unsigned long long>(m->created_unix_ns),
        static_cast<unsigned long long>(m->expires_unix_ns), m->metadata.c_str());
    return 0;
  }
  if (pub->parsed()) {
    auto n = objects([&](auto& c) { return c.Publish(channel, message); });
    if (!n) return Fail(fmt::format("pub {}", channel).c_str(), n.error());
    std::printf("%llu\n", static_cast<unsigned long long>(*n));
    return 0;
  }
  if (sub->parsed()) {
    auto kind =
        pattern ? client::Connection::SubKind::kPattern : client::Connection::SubKind::kChannel;
    auto ok = objects([&](auto& c) { return c.Subscribe(kind, channels); });
    if (!ok) return Fail("sub", ok.error());
    std::fprintf(stderr, "goblin: subscribed to %zu %s; waiting\n", channels.size(),
                 pattern ? "pattern(s)" : "channel(s)");
    auto signals = ShutdownSignal::Install();
    for (int got = 0; sub_count == 0 || got < sub_count;) {
      if (signals && (*signals)->Wait(std::chrono::milliseconds(0))) break;
      auto m = objects([&](auto& c) { return c.NextMessage(std::chrono::milliseconds(200)); });
      if (!m) return Fail("sub", m.error());
      if (!*m) continue;
      if (pattern) {
        std::printf("%s %s: %s\n", (*m)->pattern.c_str(), (*m)->channel.c_str(),
                    (*m)->payload.c_str());
      } else {
        std::printf("%s: %s\n", (*m)->channel.c_str(), (*m)->payload.c_str());
      }
      std::fflush(stdout);
      ++got;
    }
    return 0;
  }
  if (del->parsed()) {
    auto d = objects([&](auto& c) { return c.Delete(key); });
    if (!d) return Fail(fmt::format("del {}", key).c_str(), d.error());
    std::printf("%s %s\n", *d ? "deleted" : "not found:", key.c_str());
    return *d ? 0 : 2;
  }
  return 0;
}
