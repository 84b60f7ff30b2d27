// EtcdClient: a small client of etcd's v3 API over gRPC (cluster/proto/etcd/v3.proto): keys,
// leases and watches, what goblin's membership needs (no transactions), over plain HTTP/2 or
// TLS (a CA, optionally a client certificate for etcd's --client-cert-auth) and with etcd's
// auth (a user and password exchanged for a token, renewed when etcd says it expired).
// Several endpoints (an etcd cluster) share one channel with gRPC's round_robin policy, so a
// call goes to a member that answers and a dead member is passed over; over TLS every
// member's certificate is checked against the first endpoint's host name. Every unary call has
// the client's deadline (`timeout`); gRPC failures come back as kUnavailable / kTimeout /
// kPermissionDenied with etcd's message.
// Threading: any number of threads may call at once (gRPC stubs are thread-safe; the token is
// behind a mutex). A Watch is read by one thread; Cancel may come from another.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/status.h"

namespace goblin::cluster {

// How to reach a secured etcd, as etcdctl's --cacert/--cert/--key/--user say it.
struct EtcdSecurity {
  bool tls = false;     // https:// endpoints; implied by any of the files
  std::string ca_file;  // PEM: the CA of etcd's server certificates (empty: the system's roots)
  std::string cert_file, key_file;  // PEM: a client certificate and its key (both or neither)
  std::string user, password;       // etcd auth (empty user: none)
};

// The GOBLIN_ETCD_CACERT, GOBLIN_ETCD_CERT, GOBLIN_ETCD_KEY and GOBLIN_ETCD_USER ("NAME" or
// "NAME:PASSWORD") environment variables, and GOBLIN_ETCD_PASSWORD_FILE (the password on the
// file's first line): what libgoblin's etcd:// targets and the tools use unless told.
Result<EtcdSecurity> EtcdSecurityFromEnvironment();
// Fills `password` from "NAME:PASSWORD" in `user`, or from the first line of `password_file`.
VoidResult SplitEtcdUser(EtcdSecurity& s, const std::string& password_file);

struct EtcdOptions {
  std::vector<std::string> endpoints;  // "127.0.0.1:2379" (scheme taken off by the parser)
  std::chrono::milliseconds timeout{2000};
  EtcdSecurity security;
};

// "http://a:2379,http://b:2379" or "https://..." (commas; "etcd://" is not accepted here).
// `tls` (if given) says whether the endpoints are https://. Errors name the endpoint: a
// missing port, http:// and https:// mixed, an empty list.
Result<std::vector<std::string>> ParseEtcdEndpoints(std::string_view text, bool* tls = nullptr);

struct EtcdKeyValue {
  std::string key, value;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdEvent {
  enum class Type : uint8_t { kPut, kDelete } type = Type::kPut;
  EtcdKeyValue kv;  // a delete carries the key and the revision of the delete
};

class EtcdWatch;

class EtcdClient {
 public:
  static Result<std::unique_ptr<EtcdClient>> Open(const EtcdOptions& options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  const EtcdOptions& options() const { return options_; }
  // Tokens obtained from etcd so far (auth: the first call's, and one per renewal).
  uint64_t authentications() const;

  // The revision of the store after the put.
  Result<int64_t> Put(std::string_view key, std::string_view value, int64_t lease = 0);
  Result<std::optional<EtcdKeyValue>> Get(std::string_view key);
  struct Listing {
    std::vector<EtcdKeyValue> kvs;
    int64_t revision = 0;  // the store's revision the listing is of (watch from revision + 1)
  };
  Result<Listing> GetPrefix(std::string_view prefix);
  // How many keys were deleted.
  Result<int64_t> Delete(std::string_view key);

  // A lease of `ttl` (whole seconds, at least 1): its id.
  Result<int64_t> GrantLease(std::chrono::seconds ttl);
  // Renews the lease once: the TTL left after the renewal, 0 if the lease is gone (expired or
  // revoked: its keys are deleted).
  Result<int64_t> KeepAlive(int64_t lease);
  VoidResult RevokeLease(int64_t lease);

  // Watches every key under `prefix` from `start_revision` (0: from now).
  Result<std::unique_ptr<EtcdWatch>> WatchPrefix(std::string_view prefix, int64_t start_revision);

 private:
  struct Channel;
  struct Token;
  struct Impl;
  friend class EtcdWatch;
  explicit EtcdClient(EtcdOptions options, std::unique_ptr<Impl> impl);
  EtcdOptions options_;
  std::unique_ptr<Impl> impl_;
  friend class EtcdWatch;
};

// One watch stream. Next blocks until events arrive or the stream ends (an error: etcd went
// away, the revision was compacted, Cancel was called); the caller then lists again and
// watches from the listing's revision.
class EtcdWatch {
 public:
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;
  Result<std::vector<EtcdEvent>> Next();
  void Cancel();  // from any thread: the blocked Next returns kAborted

 private:
  struct Impl;
  explicit EtcdWatch(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class EtcdClient;
};

// The end of the key range that holds every key starting with `prefix` (etcd's range_end).
std::string PrefixRangeEnd(std::string_view prefix);

}  // namespace goblin::cluster
