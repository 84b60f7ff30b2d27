// TLS with OpenSSL 3: see goblin/gateway/tls.h.
#include "goblin/gateway/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace goblin::gateway {
namespace {

// OpenSSL's error queue of this thread as one line (and emptied).
std::string TakeOpensslErrors() {
  std::string out;
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? std::string("unknown OpenSSL error") : out;
}

// The DNS names a certificate answers for: its subjectAltName DNS entries, else its CN.
std::vector<std::string> CertNames(X509* cert) {
  std::vector<std::string> names;
  auto* san =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (san != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(san); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(san, i);
      if (g->type != GEN_DNS) continue;
      const ASN1_STRING* s = g->d.dNSName;
      names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                         static_cast<size_t>(ASN1_STRING_length(s)));
    }
    GENERAL_NAMES_free(san);
  }
  if (names.empty()) {
    char cn[256] = {};
    if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn) > 0)
      names.emplace_back(cn);
  }
  return names;
}

}  // namespace

TlsContext::~TlsContext() {
  for (Pair& p : pairs_) SSL_CTX_free(p.ctx);
}

Result<std::shared_ptr<TlsContext>> TlsContext::Load(std::span<const TlsCertPair> pairs,
                                                     const TlsOptions& options) {
  if (pairs.empty()) {
    return Err(StatusCode::kInvalidArgument,
               "TLS needs a certificate: give --tls-cert and --tls-key");
  }
  std::shared_ptr<TlsContext> t(new TlsContext());
  for (const std::string& a : options.alpn) {
    if (a.empty() || a.size() > 255)
      return Err(StatusCode::kInvalidArgument, "ALPN protocol '{}' is not 1-255 bytes", a);
    t->alpn_wire_.push_back(static_cast<char>(a.size()));
    t->alpn_wire_ += a;
  }
  ERR_clear_error();
  for (const TlsCertPair& pair : pairs) {
    for (const std::string* f : {&pair.cert_file, &pair.key_file}) {
      if (f->empty())
        return Err(StatusCode::kInvalidArgument,
                   "a TLS certificate needs its key (and a key its certificate)");
      if (access(f->c_str(), R_OK) != 0)
        return Err(StatusCode::kInvalidArgument, "TLS {} '{}': {}",
                   f == &pair.cert_file ? "certificate" : "key", *f, std::strerror(errno));
    }
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == nullptr) return Err(StatusCode::kInternal, "SSL_CTX_new: {}", TakeOpensslErrors());
    t->pairs_.push_back(Pair{ctx, nullptr, {}});
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    // No renegotiation (TLS 1.2; 1.3 has none); a peer that closes without close_notify
    // ends the stream like a TCP FIN (HTTP frames its own messages); the server's cipher
    // order.
    uint64_t opts =
        SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_CIPHER_SERVER_PREFERENCE;
    if (options.ktls) opts |= SSL_OP_ENABLE_KTLS;
    SSL_CTX_set_options(ctx, opts);
    // Writes may complete in part (one record at a time) and be retried from a buffer that
    // moved; idle connections give their record buffers back (nginx does the same).
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    if (SSL_CTX_use_certificate_chain_file(ctx, pair.cert_file.c_str()) != 1) {
      return Err(StatusCode::kInvalidArgument, "TLS certificate '{}': {}", pair.cert_file,
                 TakeOpensslErrors());
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, pair.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
        ERR_clear_error();
        return Err(StatusCode::kInvalidArgument, "TLS key '{}' does not match certificate '{}'",
                   pair.key_file, pair.cert_file);
      }
      return Err(StatusCode::kInvalidArgument, "TLS key '{}': {}", pair.key_file,
                 TakeOpensslErrors());
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
      ERR_clear_error();
      return Err(StatusCode::kInvalidArgument, "TLS key '{}' does not match certificate '{}'",
                 pair.key_file, pair.cert_file);
    }
    static constexpr unsigned char kSessionContext[] = "goblin-gateway";
    SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
    SSL_CTX_set_tlsext_servername_callback(ctx, &TlsContext::OnServerName);
    SSL_CTX_set_tlsext_servername_arg(ctx, t.get());
    SSL_CTX_set_alpn_select_cb(ctx, &TlsContext::OnAlpn, t.get());
    X509* cert = SSL_CTX_get0_certificate(ctx);
    t->pairs_.back().cert = cert;
    t->pairs_.back().names = CertNames(cert);
  }
  return t;
}

int TlsContext::OnServerName(SSL* ssl, int* /*alert*/, void* arg) {
  const auto* t = static_cast<const TlsContext*>(arg);
  const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
  if (name == nullptr) return SSL_TLSEXT_ERR_NOACK;
  for (size_t i = 0; i < t->pairs_.size(); ++i) {
    if (X509_check_host(static_cast<X509*>(t->pairs_[i].cert), name, 0, 0, nullptr) == 1) {
      if (i != 0) SSL_set_SSL_CTX(ssl, t->pairs_[i].ctx);
      return SSL_TLSEXT_ERR_OK;
    }
  }
  return SSL_TLSEXT_ERR_OK;  // no certificate names it: the default one (as nginx does)
}

int TlsContext::OnAlpn(SSL* /*ssl*/, const unsigned char** out, unsigned char* outlen,
                       const unsigned char* in, unsigned int inlen, void* arg) {
  const auto* t = static_cast<const TlsContext*>(arg);
  unsigned char* selected = nullptr;
  // (the first of our protocols that the client offers: the server's preference)
  if (SSL_select_next_proto(
          &selected, outlen, reinterpret_cast<const unsigned char*>(t->alpn_wire_.data()),
          static_cast<unsigned>(t->alpn_wire_.size()), in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

Result<TlsSession> TlsContext::Accept(int fd) const {
  SSL* ssl = SSL_new(pairs_[0].ctx);
  if (ssl == nullptr) return Err(StatusCode::kInternal, "SSL_new: {}", TakeOpensslErrors());
  TlsSession s(ssl);
  if (SSL_set_fd(ssl, fd) != 1)
    return Err(StatusCode::kInternal, "SSL_set_fd: {}", TakeOpensslErrors());
  SSL_set_accept_state(ssl);
  return s;
}

TlsSession& TlsSession::operator=(TlsSession&& o) noexcept {
  if (this != &o) {
    Reset();
    ssl_ = o.ssl_;
    o.ssl_ = nullptr;
  }
  return *this;
}

void TlsSession::Reset() {
  if (ssl_ != nullptr) SSL_free(ssl_);
  ssl_ = nullptr;
}

TlsSession::Io TlsSession::Map(int ret) {
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      return Io::kWantRead;
    case SSL_ERROR_WANT_WRITE:
      return Io::kWantWrite;
    case SSL_ERROR_ZERO_RETURN:
      return Io::kClosed;
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        if (errno == 0 || errno == ECONNRESET || errno == EPIPE) return Io::kClosed;
        error_ = std::strerror(errno);
        return Io::kError;
      }
      [[fallthrough]];
    default:
      error_ = TakeOpensslErrors();
      return Io::kError;
  }
}

TlsSession::Io TlsSession::Handshake() {
  ERR_clear_error();
  errno = 0;
  int r = SSL_do_handshake(ssl_);
  return r == 1 ? Io::kOk : Map(r);
}

bool TlsSession::handshake_done() const { return SSL_is_init_finished(ssl_) == 1; }

TlsSession::Io TlsSession::Read(char* buf, size_t cap, size_t* n) {
  ERR_clear_error();
  errno = 0;
  *n = 0;
  return SSL_read_ex(ssl_, buf, cap, n) == 1 ? Io::kOk : Map(0);
}

TlsSession::Io TlsSession::Write(const void* p, size_t n, size_t* written) {
  ERR_clear_error();
  errno = 0;
  *written = 0;
  return SSL_write_ex(ssl_, p, n, written) == 1 ? Io::kOk : Map(0);
}

void TlsSession::Shutdown() {
  if (ssl_ == nullptr || SSL_is_init_finished(ssl_) != 1) return;
  (void)SSL_shutdown(ssl_);
  ERR_clear_error();
}

bool TlsSession::ktls_send() const {
#ifndef OPENSSL_NO_KTLS
  return BIO_get_ktls_send(SSL_get_wbio(ssl_));
#else
  return false;
#endif
}

bool TlsSession::ktls_recv() const {
#ifndef OPENSSL_NO_KTLS
  return BIO_get_ktls_recv(SSL_get_rbio(ssl_));
#else
  return false;
#endif
}

bool TlsSession::resumed() const { return SSL_session_reused(ssl_) == 1; }

std::string_view TlsSession::alpn() const {
  const unsigned char* p = nullptr;
  unsigned int len = 0;
  SSL_get0_alpn_selected(ssl_, &p, &len);
  return p == nullptr ? std::string_view()
                      : std::string_view(reinterpret_cast<const char*>(p), len);
}

std::string_view TlsSession::server_name() const {
  const char* n = SSL_get_servername(ssl_, TLSEXT_NAMETYPE_host_name);
  return n == nullptr ? std::string_view() : std::string_view(n);
}

std::string_view TlsSession::version() const { return SSL_get_version(ssl_); }

std::string TlsSession::TakeError() {
  std::string e = std::move(error_);
  error_.clear();
  return e.empty() ? TakeOpensslErrors() : e;
}

}  // namespace goblin::gateway
