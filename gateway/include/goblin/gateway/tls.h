// TLS for the gateway's HTTP front, with OpenSSL 3: server certificates (several pairs,
// chosen by the client's SNI), TLS 1.2 and 1.3, ALPN, session resumption (TLS 1.3 tickets,
// TLS 1.2 session ids and tickets; the keys live in the context, so every worker sharing it
// resumes every other's sessions), and kTLS: after the handshake OpenSSL hands the record
// keys to the kernel where it can (SSL_OP_ENABLE_KTLS), and the connection's writes then go
// out as plain writes and sendfile (the kernel encrypts), exactly as on a plain socket.
// Where the kernel lacks it the session encrypts in user space (TlsSession::Write).
// Threading: a TlsContext is built once at start and is read-only after: workers share it
// (OpenSSL's SSL_CTX is reference-counted and its session cache locked). A TlsSession
// belongs to the one loop thread that serves its connection.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "goblin/common/status.h"

using SSL = struct ssl_st;
using SSL_CTX = struct ssl_ctx_st;

namespace goblin::gateway {

struct TlsCertPair {
  std::string cert_file;  // PEM: the certificate, then its chain
  std::string key_file;   // PEM: its private key
};

struct TlsOptions {
  // ALPN protocols offered, in the server's order of preference (a client offering none of
  // them gets no ALPN answer and may still speak HTTP/1.1).
  std::vector<std::string> alpn = {"http/1.1"};
  bool ktls = true;  // ask OpenSSL for kTLS (SSL_OP_ENABLE_KTLS)
};

class TlsSession;

class TlsContext {
 public:
  // Loads every pair (the first is the default, for clients without SNI or naming no
  // certificate here). A missing or unreadable file, a key that does not match its
  // certificate: one error naming the file.
  static Result<std::shared_ptr<TlsContext>> Load(std::span<const TlsCertPair> pairs,
                                                  const TlsOptions& options = {});
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  // A server session on the connected socket `fd` (not owned), before its handshake.
  Result<TlsSession> Accept(int fd) const;
  // The DNS names each pair's certificate answers for (subjectAltName, else its CN): for
  // the start-up log.
  const std::vector<std::string>& names(size_t pair) const { return pairs_[pair].names; }
  size_t pairs() const { return pairs_.size(); }

 private:
  TlsContext() = default;
  static int OnServerName(SSL* ssl, int* alert, void* arg);
  static int OnAlpn(SSL* ssl, const unsigned char** out, unsigned char* outlen,
                    const unsigned char* in, unsigned int inlen, void* arg);
  struct Pair {
    SSL_CTX* ctx = nullptr;  // owned
    void* cert = nullptr;    // X509*, owned by ctx
    std::vector<std::string> names;
  };
  std::vector<Pair> pairs_;
  std::string alpn_wire_;  // the protocols as length-prefixed strings
};

// One connection's TLS (owns the SSL object; the socket stays the caller's).
class TlsSession {
 public:
  enum class Io { kOk, kWantRead, kWantWrite, kClosed, kError };
  TlsSession() = default;
  explicit TlsSession(SSL* ssl) : ssl_(ssl) {}
  TlsSession(TlsSession&& o) noexcept : ssl_(o.ssl_) { o.ssl_ = nullptr; }
  TlsSession& operator=(TlsSession&& o) noexcept;
  ~TlsSession() { Reset(); }
  void Reset();
  explicit operator bool() const { return ssl_ != nullptr; }

  // Drives the handshake: kOk once it is complete.
  Io Handshake();
  bool handshake_done() const;
  // Plaintext into buf (*n bytes; kOk with *n > 0). kClosed: the peer ended the stream
  // (close_notify or EOF).
  Io Read(char* buf, size_t cap, size_t* n);
  // Encrypts and sends up to n bytes (*written on kOk). After kWantWrite the next call must
  // pass the same bytes and length (OpenSSL's rule for a retried write).
  Io Write(const void* p, size_t n, size_t* written);
  // A best-effort close_notify (non-blocking; nothing waits for the peer's).
  void Shutdown();
  bool ktls_send() const;
  bool ktls_recv() const;
  bool resumed() const;
  std::string_view alpn() const;
  std::string_view server_name() const;
  std::string_view version() const;
  // The last failure, as OpenSSL reports it (its error queue, emptied).
  std::string TakeError();

 private:
  Io Map(int ret);
  SSL* ssl_ = nullptr;
  std::string error_;
};

}  // namespace goblin::gateway
