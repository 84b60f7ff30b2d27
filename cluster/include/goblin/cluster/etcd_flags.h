// The command-line options that say how to reach a secured etcd, shared by goblin-core (its
// registration) and goblin-gateway (its etcd:// core target): --etcd-cacert, --etcd-cert,
// --etcd-key, --etcd-user NAME[:PASSWORD], --etcd-password-file, over the GOBLIN_ETCD_*
// environment (etcd_client.h). Header-only for executables that link CLI11
// (goblin_common_cli); start-up only.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "goblin/cluster/etcd_client.h"

namespace goblin::cluster {

struct EtcdSecurityFlags {
  std::string ca_file, cert_file, key_file, user, password_file;
};

inline void AddEtcdSecurityOptions(CLI::App& app, EtcdSecurityFlags* f) {
  app.add_option("--etcd-cacert", f->ca_file,
                 "PEM file of the CA that signed etcd's certificates: TLS to etcd (as "
                 "https:// endpoints; default $GOBLIN_ETCD_CACERT)");
  app.add_option("--etcd-cert", f->cert_file,
                 "PEM client certificate for etcd's --client-cert-auth (default "
                 "$GOBLIN_ETCD_CERT)");
  app.add_option("--etcd-key", f->key_file, "PEM key of --etcd-cert (default $GOBLIN_ETCD_KEY)");
  app.add_option("--etcd-user", f->user,
                 "etcd auth: NAME or NAME:PASSWORD (default $GOBLIN_ETCD_USER)");
  app.add_option("--etcd-password-file", f->password_file,
                 "etcd auth: the password on this file's first line (default "
                 "$GOBLIN_ETCD_PASSWORD_FILE)");
}

// The environment, with each flag given taking the place of its variable.
inline Result<EtcdSecurity> ResolveEtcdSecurity(const EtcdSecurityFlags& f) {
  GOBLIN_ASSIGN_OR_RETURN(EtcdSecurity s, EtcdSecurityFromEnvironment());
  if (!f.ca_file.empty()) s.ca_file = f.ca_file;
  if (!f.cert_file.empty()) s.cert_file = f.cert_file;
  if (!f.key_file.empty()) s.key_file = f.key_file;
  if (!f.user.empty() || !f.password_file.empty()) {
    if (!f.user.empty()) s.user = f.user;
    if (!f.user.empty()) s.password.clear();
    GOBLIN_RETURN_IF_ERROR(SplitEtcdUser(s, f.password_file));
  }
  return s;  // (a certificate and its key are checked together by EtcdClient::Open)
}

}  // namespace goblin::cluster
