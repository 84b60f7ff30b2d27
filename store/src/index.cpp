#include "goblin/store/index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

#include "goblin/common/clock.h"
#include "goblin/common/log.h"

namespace goblin::store {
namespace {

constexpr uint16_t kPut = 1;
constexpr uint16_t kDelete = 2;
constexpr uint16_t kTouch = 3;  // u64 expires_unix_ns, then the key (a binary before it
                                // refuses such a journal: "unknown journal record type 3")
constexpr char kCheckpointMagic[8] = {'G', 'O', 'B', 'I', 'D', 'X', 'C', '1'};
constexpr uint32_t kMaxExtents = 1u << 20;

class Writer {
 public:
  template <typename T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  void Bytes(std::string_view s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  bool Get(T* v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool Bytes(std::string* s) {
    uint32_t n;
    if (!Get(&n) || in_.size() - pos_ < n) return false;
    s->assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }
  size_t pos() const { return pos_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

VoidResult WriteFileAtomically(const std::string& path, std::span<const uint8_t> data) {
  std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) return ErrnoErr(fmt::format("create({})", tmp), errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t w = write(fd, data.data() + done, data.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      return ErrnoErr(fmt::format("write({})", tmp), err);
    }
    done += static_cast<size_t>(w);
  }
  if (fsync(fd) != 0) {
    int err = errno;
    close(fd);
    unlink(tmp.c_str());
    return ErrnoErr(fmt::format("fsync({})", tmp), err);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0)
    return ErrnoErr(fmt::format("rename({})", path), errno);
  std::string dir = path.substr(0, path.rfind('/'));
  int dfd = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return {};
}

}  // namespace

KeyDigest KeyDigest::Of(std::string_view key) {
  const KeyHash128 h = HashKey128(key);  // (XXH3-128, what a HashedKey carries)
  return {h.hi, h.lo};
}

std::vector<uint8_t> EncodeRecord(const ObjectRecord& r) {
  Writer w;
  w.Bytes(r.key);
  w.Put(r.size);
  w.Put(r.generation);
  w.Put(r.created_unix_ns);
  w.Put(r.expires_unix_ns);
  w.Bytes(r.metadata);
  w.Put<uint32_t>(static_cast<uint32_t>(r.extents.size()));
  for (const Extent& e : r.extents) {
    w.Put(e.tier);
    w.Put(uint32_t{e.drive} * kMaxDriveFiles + e.file);
    w.Put(e.offset);
    w.Put(e.length);
    w.Put(e.checksum);
  }
  // The durable marks, when there are any, as one trailing byte (a record without them
  // encodes as it did before marks existed); tags after them (the marks byte then always
  // there, 0 for none): a record without tags encodes as before tags existed.
  const uint8_t marks = r.marks & kDurableMarks;
  if (marks != 0 || !r.tags.empty()) w.Put(marks);
  if (!r.tags.empty()) w.Bytes(r.tags);
  return std::move(w.out);
}

Result<ObjectRecord> DecodeRecord(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  ObjectRecord o;
  uint32_t n = 0;
  if (!r.Bytes(&o.key) || !r.Get(&o.size) || !r.Get(&o.generation) || !r.Get(&o.created_unix_ns) ||
      !r.Get(&o.expires_unix_ns) || !r.Bytes(&o.metadata) || !r.Get(&n)) {
    return Err(StatusCode::kCorruption, "truncated object record");
  }
  // Each extent is 30 bytes: a count the rest of the record cannot hold is damage.
  if (n > kMaxExtents || static_cast<uint64_t>(n) * 30 > bytes.size() - r.pos()) {
    return Err(StatusCode::kCorruption, "object record claims {} extents", n);
  }
  o.extents.resize(n);
  uint64_t total = 0;
  for (Extent& e : o.extents) {
    if (!r.Get(&e.tier) || !r.Get(&e.file) || !r.Get(&e.offset) || !r.Get(&e.length) ||
        !r.Get(&e.checksum)) {
      return Err(StatusCode::kCorruption, "truncated extent list");
    }
    e.drive = static_cast<uint16_t>(e.file / kMaxDriveFiles);
    e.file %= kMaxDriveFiles;
    total += e.length;
  }
  if (bytes.size() - r.pos() >= 1) {
    r.Get(&o.marks);
    const bool tagged = !r.done();
    if ((o.marks & ~kDurableMarks) != 0 || (o.marks == 0 && !tagged)) {
      return Err(StatusCode::kCorruption, "object record has unknown marks {:#x}", o.marks);
    }
    if (tagged && (!r.Bytes(&o.tags) || o.tags.empty())) {
      return Err(StatusCode::kCorruption, "object record has a damaged tag list");
    }
  }
  if (!r.done()) return Err(StatusCode::kCorruption, "trailing bytes after an object record");
  if (total != o.size && !o.extents.empty()) {
    return Err(StatusCode::kCorruption, "extents hold {} bytes of a {}-byte object", total, o.size);
  }
  return o;
}

Result<std::unique_ptr<Index>> Index::Open(const std::string& dir) {
  const std::string cp_path = dir + "/index.checkpoint";
  std::vector<ObjectRecord> loaded;
  uint64_t cp_lsn = 0, cp_generation = 0;
  bool have_cp = access(cp_path.c_str(), F_OK) == 0;
  if (have_cp) {
    int fd = open(cp_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoErr(fmt::format("open({})", cp_path), errno);
    struct stat st {};
    fstat(fd, &st);
    std::vector<uint8_t> buf(static_cast<size_t>(st.st_size));
    ssize_t got = pread(fd, buf.data(), buf.size(), 0);
    close(fd);
    // Layout: magic[8] last_lsn u64 next_generation u64 count u64, then [u32 len][record]...,
    // then XXH3-64 of everything before it.
    if (got != static_cast<ssize_t>(buf.size()) || buf.size() < 40 ||
        std::memcmp(buf.data(), kCheckpointMagic, 8) != 0) {
      return Err(StatusCode::kCorruption, "{} is damaged (bad header)", cp_path);
    }
    uint64_t want;
    std::memcpy(&want, buf.data() + buf.size() - 8, 8);
    if (XXH3_64bits(buf.data(), buf.size() - 8) != want) {
      return Err(StatusCode::kCorruption, "{} is damaged (checksum mismatch)", cp_path);
    }
    Reader r(std::span<const uint8_t>(buf.data() + 8, buf.size() - 16));
    uint64_t count = 0;
    r.Get(&cp_lsn);
    r.Get(&cp_generation);
    r.Get(&count);
    for (uint64_t i = 0; i < count; ++i) {
      std::string rec;
      if (!r.Bytes(&rec)) return Err(StatusCode::kCorruption, "{} is truncated", cp_path);
      GOBLIN_ASSIGN_OR_RETURN(ObjectRecord o, DecodeRecord(AsBytes(rec)));
      loaded.push_back(std::move(o));
    }
  }
  GOBLIN_ASSIGN_OR_RETURN(Journal j, Journal::Open(dir + "/index.journal", cp_lsn + 1));
  if (j.base_lsn() > cp_lsn + 1) {
    return Err(
        StatusCode::kCorruption,
        "{}/index.journal starts at record {} but the checkpoint ends at {}: records are missing",
        dir, j.base_lsn(), cp_lsn);
  }
  std::unique_ptr<Index> idx(new Index(std::move(j)));
  idx->dir_ = dir;
  idx->next_generation_ = std::max<uint64_t>(cp_generation, 1);
  idx->recovery_.from_checkpoint = loaded.size();
  for (auto& o : loaded) idx->Apply(std::move(o), nullptr);
  idx->applied_lsn_ = cp_lsn;
  Status bad;
  GOBLIN_ASSIGN_OR_RETURN(ReplayStats rs, idx->journal_.Replay([&](uint64_t lsn, uint16_t type,
                                                                   std::span<const uint8_t> p) {
    if (lsn <= cp_lsn || !bad.ok()) return;  // already in the checkpoint
    if (type == kPut) {
      auto o = DecodeRecord(p);
      if (!o) {
        bad = o.error();
        return;
      }
      idx->next_generation_ = std::max(idx->next_generation_, o->generation + 1);
      idx->Apply(std::move(*o), nullptr);
    } else if (type == kDelete) {
      idx->Remove(std::string_view(reinterpret_cast<const char*>(p.data()), p.size()), nullptr);
    } else if (type == kTouch && p.size() >= 8) {
      uint64_t expires;
      std::memcpy(&expires, p.data(), 8);
      std::string_view key(reinterpret_cast<const char*>(p.data()) + 8, p.size() - 8);
      if (ObjectRecord* r = idx->FindMutable(key)) idx->SetExpiry(r, expires);
    } else {
      bad = Status(StatusCode::kCorruption, fmt::format("unknown journal record type {}", type));
      return;
    }
    idx->applied_lsn_ = lsn;
    ++idx->recovery_.journal_records;
  }));
  if (!bad.ok()) return Err(bad.WithContext(dir + "/index.journal"));
  idx->recovery_.discarded_bytes = rs.discarded_bytes;
  return idx;
}

ObjectRecord* Index::FindMutable(std::string_view key) {
  return FindMutable(key, KeyDigest::Of(key));
}

ObjectRecord* Index::FindMutable(std::string_view key, const KeyDigest& digest) {
  auto it = map_.find(digest);
  if (it == map_.end()) return nullptr;
  for (ObjectRecord& r : it->second) {
    if (r.key == key) return &r;
  }
  return nullptr;
}

const ObjectRecord* Index::Find(std::string_view key) const {
  return const_cast<Index*>(this)->FindMutable(key);
}

const ObjectRecord* Index::Find(const HashedKey& key) const {
  return const_cast<Index*>(this)->FindMutable(key.key, KeyDigest{key.digest.hi, key.digest.lo});
}

namespace {
// Moves a record's extent list out (its buffer, which loans point into, keeps its address),
// or appends to a list that already holds some.
void TakeExtents(std::vector<Extent>& from, std::vector<Extent>* to) {
  if (to->empty()) {
    *to = std::move(from);
  } else {
    to->insert(to->end(), from.begin(), from.end());
  }
}
}  // namespace

void Index::Apply(ObjectRecord r, std::vector<Extent>* released) {
  r.loan_handle = 0;  // a new version: no loans yet (the store retired the old one's)
  expiring_ += r.expires_unix_ns != 0 ? 1 : 0;
  const KeyDigest d = KeyDigest::Of(r.key);
  if (ObjectRecord* old = FindMutable(r.key)) {
    if (released) TakeExtents(old->extents, released);
    expiring_ -= old->expires_unix_ns != 0 ? 1 : 0;
    Detach(*old, d);
    *old = std::move(r);
    Attach(*old, d);
    return;
  }
  auto& bucket = map_[d];
  if (bucket.empty()) ScanAdd(d);
  bucket.push_back(std::move(r));
  Attach(bucket.back(), d);
  ++size_;
}

namespace {
template <typename Fn>
void ForEachTag(std::string_view tags, Fn&& fn) {
  while (!tags.empty()) {
    const size_t sp = tags.find(' ');
    if (sp != 0) fn(tags.substr(0, sp));
    if (sp == std::string_view::npos) break;
    tags.remove_prefix(sp + 1);
  }
}
}  // namespace

size_t Index::DigestSet::Find(const KeyDigest& d) const {
  if (at_.empty()) {
    for (size_t i = 0; i < v_.size(); ++i) {
      if (v_[i] == d) return i;
    }
    return SIZE_MAX;
  }
  auto it = at_.find(d);
  return it == at_.end() ? SIZE_MAX : it->second;
}

void Index::DigestSet::Insert(const KeyDigest& d) {
  if (Find(d) != SIZE_MAX) return;
  v_.push_back(d);
  if (!at_.empty()) {
    at_.emplace(d, static_cast<uint32_t>(v_.size() - 1));
  } else if (v_.size() > kLinear) {
    at_.reserve(v_.size() * 2);
    for (size_t i = 0; i < v_.size(); ++i) at_.emplace(v_[i], static_cast<uint32_t>(i));
  }
}

void Index::DigestSet::Erase(const KeyDigest& d) {
  const size_t i = Find(d);
  if (i == SIZE_MAX) return;
  if (i + 1 != v_.size()) {
    v_[i] = v_.back();
    if (!at_.empty()) at_[v_[i]] = static_cast<uint32_t>(i);
  }
  v_.pop_back();
  if (!at_.empty()) {
    at_.erase(d);
    if (v_.size() <= kLinear / 2) at_ = {};  // (small again: scans, and the map's memory back)
  }
}

namespace {
template <typename Map>
void SetAdd(Map* m, std::string_view name, const KeyDigest& d) {
  auto it = m->find(name);
  if (it == m->end()) it = m->emplace(std::string(name), typename Map::mapped_type()).first;
  it->second.Insert(d);
}
template <typename Map>
void SetRemove(Map* m, std::string_view name, const KeyDigest& d) {
  auto it = m->find(name);
  if (it == m->end()) return;
  it->second.Erase(d);  // (a digest names one key: another key of it is a 2^-128 event)
  if (it->second.empty()) m->erase(it);
}
std::string_view VariantObject(const ObjectRecord& r) {
  const size_t nul = r.key.find('\0');
  return (r.marks & kMarkVariant) != 0 && nul != std::string::npos
             ? std::string_view(r.key).substr(0, nul)
             : std::string_view();
}
}  // namespace

void Index::Attach(const ObjectRecord& r, const KeyDigest& d) {
  ForEachTag(r.tags, [&](std::string_view t) { SetAdd(&by_tag_, t, d); });
  if (std::string_view o = VariantObject(r); o.data() != nullptr) SetAdd(&by_object_, o, d);
}

void Index::Detach(const ObjectRecord& r, const KeyDigest& d) {
  ForEachTag(r.tags, [&](std::string_view t) { SetRemove(&by_tag_, t, d); });
  if (std::string_view o = VariantObject(r); o.data() != nullptr) SetRemove(&by_object_, o, d);
}

std::vector<const ObjectRecord*> Index::Variants(std::string_view object) const {
  std::vector<const ObjectRecord*> out;
  auto it = by_object_.find(object);
  if (it == by_object_.end()) return out;
  for (const KeyDigest& d : it->second.members()) {
    auto b = map_.find(d);
    if (b == map_.end()) continue;
    for (const ObjectRecord& r : b->second) {
      if (VariantObject(r) == object) out.push_back(&r);
    }
  }
  return out;
}

std::vector<KeyDigest> Index::TagMembers(std::string_view tag) const {
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end()) return {};
  return it->second.members();
}

void Index::KeysWithTag(std::span<const KeyDigest> digests, std::string_view tag,
                        std::vector<std::string>* keys) const {
  for (const KeyDigest& d : digests) {
    auto b = map_.find(d);
    if (b == map_.end()) continue;
    for (const ObjectRecord& r : b->second) {
      bool has = false;
      ForEachTag(r.tags, [&](std::string_view t) { has = has || t == tag; });
      if (has) keys->push_back(r.key);
    }
  }
}

void Index::SetExpiry(ObjectRecord* r, uint64_t expires_unix_ns) {
  if (r->expires_unix_ns != 0) --expiring_;
  if (expires_unix_ns != 0) ++expiring_;
  r->expires_unix_ns = expires_unix_ns;
}

void Index::ScanAdd(const KeyDigest& d) {
  if (map_.size() > scan_.size() * 4) {  // (map_ already holds d)
    std::vector<std::vector<KeyDigest>> grown(scan_.size() * 2);
    const uint64_t mask = grown.size() - 1;
    for (auto& b : scan_) {
      for (const KeyDigest& x : b) grown[x.hi & mask].push_back(x);
    }
    scan_ = std::move(grown);
  }
  scan_[d.hi & (scan_.size() - 1)].push_back(d);
}

void Index::ScanRemove(const KeyDigest& d) {
  auto& b = scan_[d.hi & (scan_.size() - 1)];
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] == d) {
      b[i] = b.back();
      b.pop_back();
      return;
    }
  }
}

namespace {
uint64_t ReverseBits(uint64_t v) {
  v = ((v >> 1) & 0x5555555555555555ULL) | ((v & 0x5555555555555555ULL) << 1);
  v = ((v >> 2) & 0x3333333333333333ULL) | ((v & 0x3333333333333333ULL) << 2);
  v = ((v >> 4) & 0x0F0F0F0F0F0F0F0FULL) | ((v & 0x0F0F0F0F0F0F0F0FULL) << 4);
  return __builtin_bswap64(v);
}
}  // namespace

uint64_t Index::Scan(uint64_t cursor, size_t count,
                     const std::function<bool(std::span<const ObjectRecord* const>)>& take) const {
  if (size_ == 0) return 0;
  const uint64_t mask = scan_.size() - 1;
  const size_t max_buckets = std::max<size_t>(count, 1) * 10;  // (Redis's empty-visit bound)
  uint64_t v = cursor;
  size_t offered = 0, buckets = 0;
  std::vector<const ObjectRecord*> records;
  do {
    records.clear();
    for (const KeyDigest& d : scan_[v & mask]) {
      if (auto it = map_.find(d); it != map_.end()) {
        for (const ObjectRecord& r : it->second) records.push_back(&r);
      }
    }
    if (!records.empty() && !take(records)) return v;
    offered += records.size();
    // The next bucket in reverse-binary order: increment the reversed cursor.
    v |= ~mask;
    v = ReverseBits(ReverseBits(v) + 1);
  } while (v != 0 && offered < count && ++buckets < max_buckets);
  return v;
}

bool Index::Remove(std::string_view key, std::vector<Extent>* released) {
  auto it = map_.find(KeyDigest::Of(key));
  if (it == map_.end()) return false;
  auto& bucket = it->second;
  for (size_t i = 0; i < bucket.size(); ++i) {
    if (bucket[i].key != key) continue;
    if (released) TakeExtents(bucket[i].extents, released);
    expiring_ -= bucket[i].expires_unix_ns != 0 ? 1 : 0;
    Detach(bucket[i], it->first);
    bucket.erase(bucket.begin() + static_cast<long>(i));
    if (bucket.empty()) {
      ScanRemove(it->first);
      map_.erase(it);
    }
    --size_;
    return true;
  }
  return false;
}

VoidResult Index::AfterAppend() {
  if (worker_) return {};  // a group sync makes it durable (Poll)
  return journal_.Sync();  // durable before visible
}

Result<uint64_t> Index::Commit(ObjectRecord record, std::vector<Extent>* released,
                               uint64_t* lsn_out) {
  record.generation = next_generation_;
  auto bytes = EncodeRecord(record);
  GOBLIN_ASSIGN_OR_RETURN(uint64_t lsn, journal_.Append(kPut, bytes));
  GOBLIN_RETURN_IF_ERROR(AfterAppend());
  ++next_generation_;
  applied_lsn_ = lsn;
  uint64_t gen = record.generation;
  Apply(std::move(record), released);
  if (lsn_out) *lsn_out = lsn;
  return gen;
}

Result<bool> Index::Delete(std::string_view key, std::vector<Extent>* released, uint64_t* lsn_out) {
  if (Find(key) == nullptr) return false;
  GOBLIN_ASSIGN_OR_RETURN(uint64_t lsn, journal_.Append(kDelete, AsBytes(key)));
  GOBLIN_RETURN_IF_ERROR(AfterAppend());
  applied_lsn_ = lsn;
  if (lsn_out) *lsn_out = lsn;
  return Remove(key, released);
}

Result<bool> Index::Touch(std::string_view key, uint64_t expires_unix_ns, uint64_t* lsn_out) {
  ObjectRecord* r = FindMutable(key);
  if (r == nullptr) return false;
  std::vector<uint8_t> payload(8 + key.size());
  std::memcpy(payload.data(), &expires_unix_ns, 8);
  std::memcpy(payload.data() + 8, key.data(), key.size());
  GOBLIN_ASSIGN_OR_RETURN(uint64_t lsn, journal_.Append(kTouch, payload));
  GOBLIN_RETURN_IF_ERROR(AfterAppend());
  applied_lsn_ = lsn;
  if (lsn_out) *lsn_out = lsn;
  SetExpiry(r, expires_unix_ns);
  return true;
}

Result<uint64_t> Index::Reissue(ObjectRecord* r, ObjectRecord& next, uint64_t* lsn_out) {
  // Journaled as a put of the whole record (its extents unchanged): replay replaces the
  // version before it with this one, as for any put.
  next.generation = next_generation_;
  GOBLIN_ASSIGN_OR_RETURN(uint64_t lsn, journal_.Append(kPut, EncodeRecord(next)));
  GOBLIN_RETURN_IF_ERROR(AfterAppend());
  ++next_generation_;
  applied_lsn_ = lsn;
  if (lsn_out) *lsn_out = lsn;
  r->generation = next.generation;
  return r->generation;
}

Result<uint64_t> Index::Invalidate(std::string_view key, bool set_expiry, uint64_t expires_unix_ns,
                                   uint64_t* lsn_out) {
  ObjectRecord* r = FindMutable(key);
  if (r == nullptr) return uint64_t{0};
  ObjectRecord next = *r;
  next.marks |= kMarkStale;
  if (set_expiry) next.expires_unix_ns = expires_unix_ns;
  GOBLIN_ASSIGN_OR_RETURN(uint64_t gen, Reissue(r, next, lsn_out));
  // In place: the extent list keeps its address (loans point into it).
  r->marks = next.marks;
  r->read_marks &= kMarkFetched;
  if (set_expiry) SetExpiry(r, expires_unix_ns);
  return gen;
}

Result<uint64_t> Index::Refresh(std::string_view key, std::string metadata,
                                uint64_t created_unix_ns, uint64_t expires_unix_ns,
                                uint64_t* lsn_out) {
  ObjectRecord* r = FindMutable(key);
  if (r == nullptr) return uint64_t{0};
  ObjectRecord next = *r;
  next.metadata = std::move(metadata);
  next.created_unix_ns = created_unix_ns;
  next.expires_unix_ns = expires_unix_ns;
  next.marks &= static_cast<uint8_t>(~kMarkStale);  // (validated: no longer soft-purged)
  GOBLIN_ASSIGN_OR_RETURN(uint64_t gen, Reissue(r, next, lsn_out));
  r->marks = next.marks;
  r->metadata = std::move(next.metadata);
  r->created_unix_ns = created_unix_ns;
  SetExpiry(r, expires_unix_ns);
  return gen;
}

void Index::ForEach(const std::function<void(const ObjectRecord&)>& fn) const {
  for (const auto& [d, bucket] : map_) {
    for (const ObjectRecord& r : bucket) fn(r);
  }
}

std::vector<uint8_t> Index::EncodeCheckpoint() {
  BeginEncoding();
  while (!EncodeSome()) {
  }
  return std::exchange(encoding_, {});
}

VoidResult Index::Checkpoint() {
  GOBLIN_RETURN_IF_ERROR(SyncNow());
  if (checkpoint_stage_ != CheckpointStage::kNone) {
    // A background checkpoint is half done: let it finish, then write a fresh one.
    while (checkpoint_stage_ == CheckpointStage::kEncoding) EncodeSlice();
    while (!jobs_.empty()) {
      worker_->WaitFor(jobs_.back().first);
      GOBLIN_RETURN_IF_ERROR(Poll());
    }
    GOBLIN_RETURN_IF_ERROR(SyncNow());
  }
  const uint64_t t0 = MonotonicNanos();
  std::vector<uint8_t> bytes = EncodeCheckpoint();
  stats_.last_checkpoint_encode_ns = MonotonicNanos() - t0;
  GOBLIN_RETURN_IF_ERROR(WriteFileAtomically(dir_ + "/index.checkpoint", bytes));
  ++stats_.checkpoints;
  stats_.last_checkpoint_objects = size_;
  stats_.last_checkpoint_bytes = bytes.size();
  // A crash here leaves a journal whose records are all <= the checkpoint's LSN: Open()
  // skips them. Then the journal restarts after the checkpoint.
  return journal_.Restart(applied_lsn_ + 1);
}

// ---- durability off the owner's thread ----

VoidResult Index::StartWorker() {
  if (worker_) return {};
  GOBLIN_ASSIGN_OR_RETURN(worker_, SyncWorker::Start("goblin-sync"));
  return {};
}

void Index::Submit(JobKind kind, SyncWorker::Job job) {
  jobs_.emplace_back(worker_->Submit(std::move(job)), kind);
}

VoidResult Index::OnJobDone(JobKind kind, const Status& s) {
  switch (kind) {
    case JobKind::kSync:
      return journal_.FinishSync(s);
    case JobKind::kCheckpointFile:
      if (!s.ok()) {
        // The old checkpoint and the whole journal still describe everything: keep them.
        GOBLIN_LOG_WARN("index", "background checkpoint of {} failed: {}", dir_, s);
        ++stats_.checkpoint_failures;
        journal_.Unmark();
        checkpoint_stage_ = CheckpointStage::kNone;
        next_checkpoint_try_ = MonotonicNanos() + 10'000'000'000ULL;
        return {};
      }
      checkpoint_stage_ = CheckpointStage::kRestartingJournal;  // (the job starts in Poll)
      return {};
    case JobKind::kJournalRestart: {
      checkpoint_stage_ = CheckpointStage::kNone;
      GOBLIN_RETURN_IF_ERROR(journal_.FinishRestart(s));
      ++stats_.checkpoints;
      stats_.last_checkpoint_objects = checkpoint_objects_;
      stats_.last_checkpoint_bytes = checkpoint_bytes_;
      return {};
    }
  }
  return {};
}

void Index::MaybeStartCheckpoint() {
  if (checkpoint_stage_ != CheckpointStage::kNone || !journal_.broken().ok()) return;
  bool due =
      journal_.file_bytes() >= policy_.journal_bytes ||
      (policy_.journal_records != 0 && journal_.records_in_file() >= policy_.journal_records);
  if (!due || MonotonicNanos() < next_checkpoint_try_) return;
  // The map as of the last appended record, encoded here (the map is this thread's); the
  // worker writes it. Records appended from now on are kept aside for the new journal.
  // The map as of the last appended record is the starting point; records appended from now
  // on are kept aside for the new journal. Encoded a slice per Poll (see encoding_).
  BeginEncoding();
  journal_.Mark(applied_lsn_);
  checkpoint_stage_ = CheckpointStage::kEncoding;
  EncodeSlice();
}

void Index::BeginEncoding() {
  Writer w;
  uint64_t magic;  // through an integer: GCC 12 misreports a vector insert of 8 chars here
  std::memcpy(&magic, kCheckpointMagic, 8);
  w.Put<uint64_t>(magic);
  w.Put<uint64_t>(applied_lsn_);
  w.Put<uint64_t>(0);  // next generation and count: when the last slice is done
  w.Put<uint64_t>(0);
  encoding_ = std::move(w.out);
  encode_cursor_ = encode_count_ = encode_ns_ = encode_slice_max_ns_ = 0;
}

bool Index::EncodeSome() {
  const uint64_t t0 = MonotonicNanos();
  Writer w;
  w.out = std::move(encoding_);
  size_t taken = 0;
  encode_cursor_ = Scan(encode_cursor_, kEncodeSlice, [&](std::span<const ObjectRecord* const> rs) {
    for (const ObjectRecord* r : rs) {
      auto rec = EncodeRecord(*r);
      w.Bytes(std::string_view(reinterpret_cast<const char*>(rec.data()), rec.size()));
    }
    taken += rs.size();
    return true;
  });
  encode_count_ += taken;
  const bool done = encode_cursor_ == 0 || size_ == 0;
  if (done) {
    std::memcpy(w.out.data() + 16, &next_generation_, 8);
    std::memcpy(w.out.data() + 24, &encode_count_, 8);
    w.Put<uint64_t>(XXH3_64bits(w.out.data(), w.out.size()));
  }
  encoding_ = std::move(w.out);
  const uint64_t ns = MonotonicNanos() - t0;
  encode_ns_ += ns;
  encode_slice_max_ns_ = std::max(encode_slice_max_ns_, ns);
  return done;
}

void Index::EncodeSlice() {
  if (!EncodeSome()) return;
  stats_.last_checkpoint_encode_ns = encode_ns_;
  stats_.last_checkpoint_slice_ns = encode_slice_max_ns_;
  checkpoint_objects_ = encode_count_;
  checkpoint_bytes_ = encoding_.size();
  auto bytes = std::make_shared<std::vector<uint8_t>>(std::exchange(encoding_, {}));
  checkpoint_stage_ = CheckpointStage::kWritingFile;
  Submit(JobKind::kCheckpointFile, [bytes, path = dir_ + "/index.checkpoint"]() -> Status {
    auto r = WriteFileAtomically(path, *bytes);
    return r ? Status() : r.error();
  });
}

VoidResult Index::Poll() {
  if (!worker_) return {};
  Status failed;
  if (!jobs_.empty()) {
    for (const SyncWorker::Done& d : worker_->Poll()) {
      if (jobs_.empty() || jobs_.front().first != d.id) continue;  // (not ours: cannot happen)
      JobKind kind = jobs_.front().second;
      jobs_.pop_front();
      if (auto r = OnJobDone(kind, d.status); !r && failed.ok()) failed = r.error();
    }
  }
  if (!failed.ok()) return goblin::Err(failed);
  if (!journal_.broken().ok()) return {};
  if (checkpoint_stage_ == CheckpointStage::kRestartingJournal && !journal_.job_in_flight()) {
    if (auto job = journal_.RestartJob()) Submit(JobKind::kJournalRestart, std::move(job));
  } else if (!journal_.job_in_flight() && journal_.has_pending()) {
    if (auto job = journal_.SyncJob()) {
      ++stats_.group_syncs;
      stats_.synced_records += journal_.last_lsn() - journal_.durable_lsn();
      Submit(JobKind::kSync, std::move(job));
    }
  }
  if (checkpoint_stage_ == CheckpointStage::kEncoding) {
    EncodeSlice();
  } else {
    MaybeStartCheckpoint();
  }
  return {};
}

VoidResult Index::SyncNow() {
  if (!worker_) return journal_.Sync();
  // Wait for what is in flight (it may be a checkpoint too), then sync the rest.
  for (int round = 0; round < 1000; ++round) {
    if (!journal_.broken().ok()) return goblin::Err(journal_.broken());
    if (journal_.durable_lsn() >= journal_.last_lsn() &&
        checkpoint_stage_ != CheckpointStage::kRestartingJournal) {
      return {};
    }
    if (!jobs_.empty()) worker_->WaitFor(jobs_.back().first);
    GOBLIN_RETURN_IF_ERROR(Poll());
  }
  return goblin::Err(StatusCode::kInternal, "{}: the journal does not become durable", dir_);
}

}  // namespace goblin::store
