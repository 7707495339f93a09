/*
 * The compact-AST walk of cdmpp.featurize.ast and cdmpp.featurize.access, compiled.
 *
 * It reads the scheduled PrimFunc through tvm-ffi's reflection (field getters by type key and
 * field name; no TVM compiler header is needed) and computes, in one pass, what the Python walk
 * (featurize/ast.py, _Builder.visit and build_tree; featurize/access.py, AccessState) computes:
 * the node arrays, the leaves' own features and their 90 buffer-access features.  Every
 * floating-point operation is done in the order Python does it, in double precision, so the
 * values are identical (tests/unit/test_featurize_compiled.py compares them).
 *
 * Output of cdmpp_walk(func): a Bytes payload, or one of two markers:
 *   "E<message>"  the program holds a construct the featurizer refuses (UnsupportedProgramError);
 *   "F<reason>"   a case the compiled walk leaves to the Python walk (an annotation value that
 *                 is not an int32 or a string, a loop kind past thread binding, ...).
 * The payload ("P", then little-endian, 8-byte aligned from offset 8):
 *   int64 header[8]: N nodes, L leaves, dropped leaves, string bytes, ann pairs, 0, 0, 0
 *   int64 node_parent[N], int64 node_kind[N], int64 node_extent[N], int64 ann_count[N],
 *   int64 leaf_position[L], float32 leaf_features[L * 119] (padded to 8 bytes),
 *   then the strings, each ended by '\0': N node names, L leaf buffer names, then the
 *   annotation (key, value) pairs of the nodes in order.  The root's name is left empty
 *   (the caller knows the function's symbol).
 */
#include <tvm/ffi/any.h>
#include <tvm/ffi/c_api.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/map.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/function.h>
#include <tvm/ffi/string.h>

#include <algorithm>
#include <array>
#include <tuple>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory_resource>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

namespace ffi = tvm::ffi;
using ffi::Any;
using ffi::Object;

constexpr int kRoot = -1, kLeaf = 5;
constexpr int kOwn = 29, kAccessBuffers = 5, kPerBuffer = 18, kAccessDim = 90, kFeat = kOwn + kAccessDim;
constexpr int kRead = 0, kWrite = 1, kReadWrite = 2;
constexpr int kLoopRead = 0, kNoReuse = 2;
constexpr double kCacheLine = 64.0;

struct Fallback {
  std::string why;
};
struct Unsupported {
  std::string why;
};

// ---------------------------------------------------------------- reflection
enum Kind : int {
  kOther = 0,
  // statements
  kFor, kSeqStmt, kBufferStore, kSBlockRealize, kSBlock, kIfThenElse, kBodyOnly, kEvaluate,
  // expressions
  kVar, kIntImm, kLeafExpr, kLoad, kCall, kAdd, kSub, kMul, kDiv, kFloorDiv, kFloorMod, kMod, kMin, kMax,
  kCmp, kNot, kSelect, kCast, kBroadcast, kRamp, kString, kOp,
};

enum Fld : int {
  f_a, f_annotations, f_args, f_b, f_base, f_block, f_body, f_buffer, f_condition, f_dtype, f_else_case, f_extent, f_false_value, f_indices, f_init, f_iter_values, f_iter_vars, f_kind, f_loop_var, f_min, f_name, f_op, f_seq, f_shape, f_source, f_stride, f_then_case, f_thread_binding, f_thread_tag, f_true_value, f_ty, f_value, f_var, kNumFields
};
const char* const kFieldNames[] = {"a", "annotations", "args", "b", "base", "block", "body", "buffer", "condition", "dtype", "else_case", "extent", "false_value", "indices", "init", "iter_values", "iter_vars", "kind", "loop_var", "min", "name", "op", "seq", "shape", "source", "stride", "then_case", "thread_binding", "thread_tag", "true_value", "ty", "value", "var"};

struct TypeEntry {
  Kind kind = kOther;
  std::string name;  // the last part of the type key: the Python class's name
  std::array<const TVMFFIFieldInfo*, kNumFields> fields{};
};

class Types {
 public:
  const TypeEntry& Of(int32_t index) {
    if (index >= static_cast<int32_t>(table_.size())) table_.resize(index + 1);
    TypeEntry*& e = table_[index];
    if (e == nullptr) e = Make(index);
    return *e;
  }

 private:
  static TypeEntry* Make(int32_t index) {
    auto* e = new TypeEntry();  // lives as long as the process, as the type table does
    const TVMFFITypeInfo* info = TVMFFIGetTypeInfo(index);
    if (info == nullptr) return e;
    std::string key(info->type_key.data, info->type_key.size);
    size_t dot = key.rfind('.');
    e->name = dot == std::string::npos ? key : key.substr(dot + 1);
    for (int32_t d = 0; d <= info->type_depth; ++d) {
      const TVMFFITypeInfo* t = d < info->type_depth ? info->type_ancestors[d] : info;
      for (int32_t i = 0; i < t->num_fields; ++i) {
        std::string_view field(t->fields[i].name.data, t->fields[i].name.size);
        for (int f = 0; f < kNumFields; ++f)
          if (field == kFieldNames[f]) e->fields[f] = &t->fields[i];
      }
    }
    static const std::unordered_map<std::string, Kind> kinds = {
        {"For", kFor}, {"SeqStmt", kSeqStmt}, {"BufferStore", kBufferStore}, {"SBlockRealize", kSBlockRealize},
        {"SBlock", kSBlock}, {"IfThenElse", kIfThenElse}, {"AttrStmt", kBodyOnly}, {"LetStmt", kBodyOnly},
        {"Bind", kBodyOnly}, {"AllocBuffer", kBodyOnly}, {"DeclBuffer", kBodyOnly}, {"AssertStmt", kBodyOnly},
        {"Allocate", kBodyOnly}, {"Evaluate", kEvaluate}, {"Var", kVar}, {"SizeVar", kVar}, {"IntImm", kIntImm},
        {"FloatImm", kLeafExpr}, {"StringImm", kLeafExpr}, {"BufferLoad", kLoad}, {"TensorLoad", kLoad},
        {"Call", kCall}, {"Add", kAdd}, {"Sub", kSub}, {"Mul", kMul}, {"Div", kDiv}, {"FloorDiv", kFloorDiv},
        {"FloorMod", kFloorMod}, {"Mod", kMod}, {"Min", kMin}, {"Max", kMax}, {"EQ", kCmp}, {"NE", kCmp},
        {"LT", kCmp}, {"LE", kCmp}, {"GT", kCmp}, {"GE", kCmp}, {"And", kCmp}, {"Or", kCmp}, {"Not", kNot},
        {"Select", kSelect}, {"Cast", kCast}, {"Broadcast", kBroadcast}, {"Ramp", kRamp}, {"Op", kOp},
    };
    if (key == "ffi.String") {
      e->kind = kString;
    } else {
      auto it = kinds.find(e->name);
      if (it != kinds.end()) e->kind = it->second;
    }
    return e;
  }
  std::vector<TypeEntry*> table_;
};

Types& types() {
  static Types t;
  return t;
}

inline bool IsObject(const Any& v) { return v.type_index() >= ffi::TypeIndex::kTVMFFIStaticObjectBegin; }

inline const Object* Ptr(const Any& v) {
  return IsObject(v) ? static_cast<const Object*>(v.as<ffi::ObjectRef>()->get()) : nullptr;
}

// A field of an object; a None Any when the type has no such field.
inline Any Get(const Object* obj, Fld name) {
  const TVMFFIFieldInfo* f = types().Of(obj->type_index()).fields[name];
  if (f == nullptr) return Any();
  Any result;
  const void* addr = reinterpret_cast<const char*>(obj) + f->offset;
  TVM_FFI_CHECK_SAFE_CALL(f->getter(const_cast<void*>(addr), reinterpret_cast<TVMFFIAny*>(&result)));
  return result;
}

// An object field read in place, without a reference count: a field declared as an object
// (or an optional one, a single pointer) is read from its slot; any other through its getter.
inline const Object* Obj(const Object* obj, Fld name) {
  const TVMFFIFieldInfo* f = types().Of(obj->type_index()).fields[name];
  if (f == nullptr) return nullptr;
  if (f->size == sizeof(void*) && (f->field_static_type_index >= ffi::TypeIndex::kTVMFFIStaticObjectBegin ||
                                   f->field_static_type_index == ffi::TypeIndex::kTVMFFIAny)) {
    return *reinterpret_cast<const Object* const*>(reinterpret_cast<const char*>(obj) + f->offset);
  }
  return Ptr(Get(obj, name));
}

// The elements of an array held by the tree (valid as long as the tree).
struct Span {
  const Any* first = nullptr;
  size_t n = 0;
  const Any* begin() const { return first; }
  const Any* end() const { return first + n; }
  size_t size() const { return n; }
  const Any& operator[](size_t i) const { return first[i]; }
};

inline Span Elements(const Object* arr) {
  if (arr == nullptr || arr->type_index() != ffi::TypeIndex::kTVMFFIArray) return Span();
  const auto* a = static_cast<const ffi::ArrayObj*>(arr);
  return Span{a->size() ? &(*a)[0] : nullptr, a->size()};
}

inline Span Arr(const Object* obj, Fld name) { return Elements(Obj(obj, name)); }

// The object an element holds, without a reference count (nullptr for a POD value).
inline const Object* Raw(const Any& v) {
  const TVMFFIAny* raw = reinterpret_cast<const TVMFFIAny*>(&v);
  return raw->type_index >= ffi::TypeIndex::kTVMFFIStaticObjectBegin ? reinterpret_cast<const Object*>(raw->v_obj)
                                                                       : nullptr;
}

inline Kind KindOf(const Object* obj) { return types().Of(obj->type_index()).kind; }
inline const std::string& NameOf(const Object* obj) { return types().Of(obj->type_index()).name; }

inline std::string Str(const Any& v) {
  if (auto s = v.as<ffi::String>()) return std::string(*s);
  return std::string();
}

inline int64_t IntValue(const Object* imm) { return Get(imm, f_value).cast<int64_t>(); }

// ---------------------------------------------------------------- Python arithmetic
inline double PyFloorDiv(double vx, double wx) {  // CPython's float_floor_div
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) div -= 1.0;
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
  return floordiv;
}
inline double PyMax(double a, double b) { return b > a ? b : a; }
inline double PyMin(double a, double b) { return b < a ? b : a; }
inline double Log2p(double x) { return std::log2(1.0 + std::fabs(x)); }
inline double SignedLog(double x) { return std::copysign(std::log2(1.0 + std::fabs(x)), x); }

// ---------------------------------------------------------------- affine forms
// The coefficients of an affine form, in insertion order, stored inline (an index of more
// loops than this is left to the Python walk).
class Coefs {
 public:
  static constexpr int kCap = 8;
  bool empty() const { return n_ == 0; }
  const std::pair<int, double>* begin() const { return c_.data(); }
  const std::pair<int, double>* end() const { return c_.data() + n_; }
  std::pair<int, double>* begin() { return c_.data(); }
  std::pair<int, double>* end() { return c_.data() + n_; }
  void emplace_back(int p, double v) {
    if (n_ == kCap) throw Fallback{"an index over more loops than the compiled walk keeps"};
    c_[n_++] = {p, v};
  }

 private:
  std::array<std::pair<int, double>, kCap> c_;
  int n_ = 0;
};

struct Form {
  Coefs coefs;  // loop position -> coefficient
  double k = 0.0;
};

inline Form Const(double k) {
  Form f;
  f.k = k;
  return f;
}

// A small map keyed by object, searched newest first (the walk's scopes hold few entries).
template <typename V>
class PtrMap {
 public:
  const V* find(const Object* key) const {
    for (auto it = items_.rbegin(); it != items_.rend(); ++it)
      if (it->first == key) return &it->second;
    return nullptr;
  }
  void set(const Object* key, V value) {
    for (auto it = items_.rbegin(); it != items_.rend(); ++it)
      if (it->first == key) {
        it->second = std::move(value);
        return;
      }
    items_.emplace_back(key, std::move(value));
  }
  void erase(const Object* key) {
    for (auto it = items_.begin(); it != items_.end(); ++it)
      if (it->first == key) {
        items_.erase(it);
        return;
      }
  }

 private:
  std::vector<std::pair<const Object*, V>> items_;
};

inline void AddTo(Coefs* out, int p, double c, bool sub) {
  for (auto& [q, v] : *out)
    if (q == p) {
      v = sub ? v - c : v + c;
      return;
    }
  out->emplace_back(p, sub ? 0.0 - c : 0.0 + c);
}

struct BufferInfo {
  std::vector<double> shape;
  int nbytes;
  std::vector<double> stride;
  std::string name;
  std::string dtype;
  int bits, lanes;
};

int DtypeBytesUncached(const std::string& dtype) {  // access.py _dtype_bytes
  static const std::regex re("[a-z]+?(\\d+)?(?:x(\\d+))?");
  std::smatch m;
  if (!std::regex_match(dtype, m, re)) return 4;
  int bits = m[1].matched ? std::stoi(m[1].str()) : 8;
  int lanes = m[2].matched ? std::stoi(m[2].str()) : 1;
  return std::max(1, bits * lanes / 8);
}

int DtypeBytes(const std::string& dtype) {
  static thread_local std::unordered_map<std::string, int> cache;
  auto it = cache.find(dtype);
  if (it != cache.end()) return it->second;
  return cache[dtype] = DtypeBytesUncached(dtype);
}

struct Stats {
  int64_t loads = 0, add_sub = 0, mul = 0, div_mod = 0, max_min = 0, calls = 0, select_cmp = 0, casts = 0;
  std::vector<const std::string*> read_names;  // the names of the buffers it loads
};

template <typename T>
using PVec = std::pmr::vector<T>;

struct Access {
  const Object* buf;
  int kind;
  PVec<Span> multi;
};

// ---------------------------------------------------------------- the walk
class Walk {
 public:
  std::vector<int64_t> parent, kind, extent, ann_count;
  std::vector<std::string> names;
  std::vector<std::pair<std::string, std::string>> anns;
  struct LeafRec {
    int node;
    const Object* buffer;
    std::vector<int> path;
    bool in_init;
    Stats st;
  };
  std::vector<LeafRec> leaves;
  std::vector<std::array<float, kAccessDim>> access_rows;
  int64_t dropped = 0;

  int Add(int p, int k, int64_t ext, std::string name) {
    parent.push_back(p);
    kind.push_back(k);
    extent.push_back(ext);
    names.push_back(std::move(name));
    ann_count.push_back(0);
    return static_cast<int>(parent.size()) - 1;
  }

  void Visit(const Object* s, int par, std::vector<int>& path, bool in_init) {
    switch (KindOf(s)) {
      case kFor:
        return VisitFor(s, par, path, in_init);
      case kSeqStmt: {
        Span seq = Arr(s, f_seq);
        for (const Any& sub : seq) Visit(Raw(sub), par, path, in_init);
        return;
      }
      case kBufferStore: {
        const Object* buf = Obj(s, f_buffer);
        int node = Add(par, kLeaf, 0, Info(buf).name);
        if (in_rewrite_) ++dropped;
        LeafRec leaf{node, buf, path, in_init, Stats()};
        access_rows.push_back(Features(s, &leaf.st));
        leaves.push_back(std::move(leaf));
        return;
      }
      case kSBlockRealize: {  // binds the block's iteration variables, restored after it
        const Object* block = Obj(s, f_block);
        Span ivs = Arr(block, f_iter_vars);
        Span values = Arr(s, f_iter_values);
        size_t n = std::min(ivs.size(), values.size());
        std::vector<std::pair<const Object*, std::optional<Form>>> saved;
        for (size_t i = 0; i < n; ++i) {
          const Object* var = Obj(Raw(ivs[i]), f_var);
          Form form = Lin(Raw(values[i]));
          const Form* before = env_.find(var);
          saved.emplace_back(var, before == nullptr ? std::nullopt : std::optional<Form>(*before));
          env_.set(var, form);
        }
        Visit(block, par, path, in_init);
        for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
          if (it->second) {
            env_.set(it->first, *it->second);
          } else {
            env_.erase(it->first);
          }
        }
        return;
      }
      case kSBlock: {
        bool outer = in_rewrite_;
        if (!outer) {
          Any ann = Get(s, f_annotations);
          if (auto m = ann.as<ffi::Map<Any, Any>>()) {
            for (const auto& kv : *m)
              if (Str(kv.first) == "meta_schedule.layout_rewrite_preproc") in_rewrite_ = true;
          }
        }
        const Object* init = Obj(s, f_init);
        if (init != nullptr) Visit(init, par, path, true);
        Visit(Obj(s, f_body), par, path, in_init);
        in_rewrite_ = outer;
        return;
      }
      case kIfThenElse: {
        Visit(Obj(s, f_then_case), par, path, in_init);
        const Object* other = Obj(s, f_else_case);
        if (other != nullptr) Visit(other, par, path, in_init);
        return;
      }
      case kBodyOnly: {
        const Object* body = Obj(s, f_body);
        if (body != nullptr) Visit(body, par, path, in_init);
        return;
      }
      case kEvaluate:
        return;
      default:
        throw Unsupported{"unsupported TensorIR construct '" + NameOf(s) + "' in the program body"};
    }
  }

 private:
  PtrMap<std::pair<int, double>> loop_pos_;
  PtrMap<double> fixed_;
  PtrMap<Form> env_;
  std::unordered_map<const Object*, BufferInfo> buffers_;
  std::vector<double> ext_;
  bool in_rewrite_ = false;
  alignas(16) std::array<char, 1 << 15> scratch_;
  std::pmr::monotonic_buffer_resource arena_{scratch_.data(), scratch_.size()};  // each store's scratch

  static double MinOf(const Object* loop) {
    const Object* lo = Obj(loop, f_min);
    return lo != nullptr && KindOf(lo) == kIntImm ? static_cast<double>(IntValue(lo)) : 0.0;
  }

  void VisitFor(const Object* s, int par, std::vector<int>& path, bool in_init) {
    const Object* ext = Obj(s, f_extent);
    int64_t e = ext != nullptr && KindOf(ext) == kIntImm ? IntValue(ext) : -1;
    const Object* var = Obj(s, f_loop_var);
    if (e == 1) {
      fixed_.set(var, MinOf(s));
      Visit(Obj(s, f_body), par, path, in_init);
      return;
    }
    int64_t k = Get(s, f_kind).cast<int64_t>();
    if (k < 0 || k > 4) throw Fallback{"loop kind " + std::to_string(k)};
    int node = Add(par, static_cast<int>(k), e, Str(Get(var, f_name)));
    int64_t count = 0;
    Any annotations = Get(s, f_annotations);
    if (auto m = annotations.as<ffi::Map<Any, Any>>()) {
      for (const auto& kv : *m) {
        anns.emplace_back(Str(kv.first), AnnotationValue(kv.second));
        ++count;
      }
    }
    const Object* binding = Obj(s, f_thread_binding);
    if (binding != nullptr) {
      std::string tag = Str(Get(binding, f_thread_tag));
      bool replaced = false;
      for (size_t i = anns.size() - count; i < anns.size(); ++i)
        if (anns[i].first == "thread_tag") {
          anns[i].second = tag;
          replaced = true;
        }
      if (!replaced) {
        anns.emplace_back("thread_tag", tag);
        ++count;
      }
    }
    ann_count[node] = count;
    path.push_back(node);
    if (e > 1) {
      loop_pos_.set(var, {static_cast<int>(ext_.size()), MinOf(s)});
      ext_.push_back(static_cast<double>(e));
      Visit(Obj(s, f_body), node, path, in_init);
      ext_.pop_back();
      loop_pos_.erase(var);
    } else {  // symbolic extent: the access features take the loop at its min
      fixed_.set(var, MinOf(s));
      Visit(Obj(s, f_body), node, path, in_init);
    }
    path.pop_back();
  }

  static std::string AnnotationValue(const Any& v) {
    if (v.type_index() == ffi::TypeIndex::kTVMFFIInt) return std::to_string(v.cast<int64_t>());
    if (v.type_index() == ffi::TypeIndex::kTVMFFIBool) return v.cast<bool>() ? "True" : "False";
    if (auto s = v.as<ffi::String>()) return std::string(*s);
    if (auto arr = v.as<ffi::Array<Any>>()) {  // Python prints an array as a tuple: (0, 1, 2), (0,), ()
      std::string out = "(";
      for (size_t i = 0; i < arr->size(); ++i) {
        const Any& x = (*arr)[i];
        if (x.type_index() != ffi::TypeIndex::kTVMFFIInt) throw Fallback{"an annotation array of other than integers"};
        out += (i ? ", " : "") + std::to_string(x.cast<int64_t>());
      }
      return out + (arr->size() == 1 ? ",)" : ")");
    }
    const Object* obj = Ptr(v);
    if (obj != nullptr && KindOf(obj) == kIntImm) {
      DLDataType t = Get(Obj(obj, f_ty), f_dtype).cast<DLDataType>();
      if (t.code == kDLInt && t.bits == 32 && t.lanes == 1) return std::to_string(IntValue(obj));
    }
    throw Fallback{"an annotation value of another type"};
  }

  Form Lin(const Object* e) {
    if (e == nullptr) return Form();
    switch (KindOf(e)) {
      case kVar: {
        if (const auto* at = loop_pos_.find(e)) {
          Form f = Const(at->second);
          f.coefs.emplace_back(at->first, 1.0);
          return f;
        }
        if (const double* fx = fixed_.find(e)) return Const(*fx);
        if (const Form* en = env_.find(e)) return *en;
        return Form();
      }
      case kIntImm:
        return Const(static_cast<double>(IntValue(e)));
      case kAdd:
      case kSub: {
        bool sub = KindOf(e) == kSub;
        Form a = Lin(Obj(e, f_a)), b = Lin(Obj(e, f_b));
        if (!sub && b.coefs.empty()) return Form{a.coefs, a.k + b.k};
        Form out{a.coefs, sub ? a.k - b.k : a.k + b.k};
        for (auto& [p, c] : b.coefs) AddTo(&out.coefs, p, c, sub);
        return out;
      }
      case kMul: {
        Form a = Lin(Obj(e, f_a)), b = Lin(Obj(e, f_b));
        if (a.coefs.empty()) {
          Form out = Const(a.k * b.k);
          for (auto& [p, c] : b.coefs) out.coefs.emplace_back(p, c * a.k);
          return out;
        }
        if (b.coefs.empty()) {
          Form out = Const(a.k * b.k);
          for (auto& [p, c] : a.coefs) out.coefs.emplace_back(p, c * b.k);
          return out;
        }
        Form out{a.coefs, a.k * b.k};  // not affine: keep which loops it depends on ({**ca, **cb})
        for (auto& [p, c] : b.coefs) {
          bool found = false;
          for (auto& [q, v] : out.coefs)
            if (q == p) {
              v = c;
              found = true;
            }
          if (!found) out.coefs.emplace_back(p, c);
        }
        return out;
      }
      case kFloorDiv:
      case kDiv: {
        Form a = Lin(Obj(e, f_a)), b = Lin(Obj(e, f_b));
        if (b.coefs.empty() && b.k != 0.0) {
          Form out = Const(PyFloorDiv(a.k, b.k));
          for (auto& [p, c] : a.coefs) out.coefs.emplace_back(p, c / b.k);
          return out;
        }
        return Form{a.coefs, a.k};
      }
      case kFloorMod:
      case kMod:
      case kMin:
      case kMax:
        return Lin(Obj(e, f_a));
      case kCast:
        return Lin(Obj(e, f_value));
      default:
        return Form();
    }
  }

  const BufferInfo& Info(const Object* buf) {
    auto it = buffers_.find(buf);
    if (it != buffers_.end()) return it->second;
    BufferInfo info;
    info.name = Str(Get(buf, f_name));
    const Object* ty = Obj(buf, f_ty);
    Span shape = Arr(ty, f_shape);
    for (const Any& d : shape) {
      const Object* o = Raw(d);
      info.shape.push_back(o != nullptr && KindOf(o) == kIntImm ? static_cast<double>(IntValue(o)) : 1.0);
    }
    info.stride.assign(info.shape.size(), 1.0);
    for (int d = static_cast<int>(info.shape.size()) - 2; d >= 0; --d)
      info.stride[d] = info.stride[d + 1] * info.shape[d + 1];
    DLDataType t = Get(Obj(ty, f_dtype), f_dtype).cast<DLDataType>();
    info.dtype = std::string(ffi::DLDataTypeToString(t));
    info.bits = t.bits;
    info.lanes = t.lanes;
    info.nbytes = DtypeBytes(info.dtype);
    return buffers_.emplace(buf, std::move(info)).first->second;
  }

  PVec<Access> Accesses(const Object* store, Stats* st) {
    PVec<Access> acc(&arena_);
    auto find = [&acc](const Object* b) -> Access* {
      for (auto& a : acc)
        if (a.buf == b) return &a;
      return nullptr;
    };
    acc.push_back(Access{Obj(store, f_buffer), kWrite, PVec<Span>(1, Arr(store, f_indices), &arena_)});
    PVec<const Object*> stack(1, Obj(store, f_value), &arena_);
    static const Fld kSubExprs[] = {f_a, f_b, f_value, f_condition, f_true_value, f_false_value, f_base, f_stride};
    while (!stack.empty()) {
      const Object* e = stack.back();
      stack.pop_back();
      if (e == nullptr) continue;
      Kind k = KindOf(e);
      switch (k) {
        case kVar:
        case kIntImm:
        case kLeafExpr:
          continue;
        case kLoad: {
          const Object* buf = Obj(e, f_buffer);
          if (buf == nullptr) buf = Obj(e, f_source);
          st->loads += 1;
          st->read_names.push_back(&Info(buf).name);
          Access* entry = find(buf);
          if (entry == nullptr) {
            acc.push_back(Access{buf, kRead, PVec<Span>(&arena_)});
            entry = &acc.back();
          } else if (entry->kind == kWrite) {
            entry->kind = kReadWrite;
          }
          Span indices = Arr(e, f_indices);
          if (entry->kind != kReadWrite) entry->multi.push_back(indices);
          for (const Any& i : indices) stack.push_back(Raw(i));
          continue;
        }
        case kCall: {
          const Object* opo = Obj(e, f_op);
          std::string name = opo != nullptr && KindOf(opo) == kOp ? Str(Get(opo, f_name)) : std::string();
          if (name.size() >= 12 && name.compare(name.size() - 12, 12, "if_then_else") == 0) {
            st->select_cmp += 1;
          } else {
            st->calls += 1;
          }
          Span args = Arr(e, f_args);
          for (const Any& a : args) stack.push_back(Raw(a));
          continue;
        }
        default:
          break;
      }
      switch (k) {
        case kAdd: case kSub: st->add_sub += 1; break;
        case kMul: st->mul += 1; break;
        case kDiv: case kFloorDiv: case kFloorMod: case kMod: st->div_mod += 1; break;
        case kMin: case kMax: st->max_min += 1; break;
        case kCmp: case kNot: case kSelect: st->select_cmp += 1; break;
        case kCast: st->casts += 1; break;
        default: break;
      }
      switch (k) {
        case kAdd: case kSub: case kMul: case kDiv: case kFloorDiv: case kFloorMod: case kMod: case kMin:
        case kMax: case kCmp:
          stack.push_back(Obj(e, f_a));
          stack.push_back(Obj(e, f_b));
          break;
        case kNot: stack.push_back(Obj(e, f_a)); break;
        case kCast: case kBroadcast: stack.push_back(Obj(e, f_value)); break;
        case kSelect:
          stack.push_back(Obj(e, f_condition));
          stack.push_back(Obj(e, f_true_value));
          stack.push_back(Obj(e, f_false_value));
          break;
        case kRamp:
          stack.push_back(Obj(e, f_base));
          stack.push_back(Obj(e, f_stride));
          break;
        default:  // another expression kind: every operand name that holds an object
          for (Fld attr : kSubExprs) {
            Any sub = Get(e, attr);
            if (IsObject(sub) && KindOf(Ptr(sub)) != kString) stack.push_back(Ptr(sub));
          }
      }
    }
    return acc;
  }

  // The region an access touches under the loops: numel[i], the elements touched while loops
  // i.. vary; size0, its size per dimension under all of them; and the (loop, dimension,
  // coefficient) entries of the loops it depends on, in first-use order (access.py's by_loop,
  // flat: the entries of one loop keep their order).
  struct Region {
    PVec<double> numel, size0;
    PVec<std::tuple<int, int, double>> by_loop;
    explicit Region(std::pmr::memory_resource* r) : numel(r), size0(r), by_loop(r) {}
    int Inner() const {
      int inner = -1;
      for (auto& [p, d, c] : by_loop) inner = std::max(inner, p);
      return inner;
    }
  };

  static double Prod(const PVec<double>& v) {
    double t = 1.0;
    for (double x : v) t *= x;
    return t;
  }

  Region OneAccess(const PVec<Form>& form, const std::vector<double>& shape, const std::vector<double>& ext) {
    int n = static_cast<int>(ext.size());
    Region r(&arena_);
    PVec<double> hi(&arena_);
    for (auto& f : form) hi.push_back(f.k);
    PVec<double> lo(hi, &arena_);
    for (size_t d = 0; d < form.size(); ++d)
      for (auto& [p, c] : form[d].coefs)
        if (c != 0.0 && p < n) r.by_loop.emplace_back(p, static_cast<int>(d), c);
    size_t m = std::min(hi.size(), shape.size());
    PVec<double> sizes(m, 0.0, &arena_);
    for (size_t d = 0; d < m; ++d) sizes[d] = PyMin(PyMax(hi[d] - lo[d] + 1.0, 1.0), shape[d]);
    double total = Prod(sizes);
    r.numel.assign(n, 1.0);
    for (int i = n - 1; i >= 0; --i) {
      bool any = false;
      for (auto& [p, d, c] : r.by_loop) {
        if (p != i) continue;
        any = true;
        double span = ext[i] - 1;
        if (c > 0) {
          hi[d] += c * span;
        } else {
          lo[d] += c * span;
        }
        sizes[d] = PyMin(PyMax(hi[d] - lo[d] + 1.0, 1.0), shape[d]);
      }
      if (any) total = Prod(sizes);
      r.numel[i] = total;
    }
    if (n) {
      r.size0.assign(sizes.begin(), sizes.end());
    } else {
      r.size0.assign(shape.size(), 1.0);
    }
    return r;
  }

  Region ManyAccesses(const PVec<PVec<Form>>& forms, const std::vector<double>& shape, const std::vector<double>& ext) {
    int n = static_cast<int>(ext.size());
    size_t ndim = shape.size(), count = forms.size();
    PVec<double> up(&arena_), down(&arena_);  // [k * ndim + d]
    for (auto& idx : forms)
      for (size_t d = 0; d < ndim; ++d) up.push_back(idx[d].k);
    down = up;
    PVec<int> order(&arena_);  // loops in first-use order
    PVec<std::tuple<int, int, int, double>> by_k(&arena_);  // (loop, k, d, coef)
    for (size_t k = 0; k < count; ++k)
      for (size_t d = 0; d < forms[k].size(); ++d)
        for (auto& [p, c] : forms[k][d].coefs)
          if (c != 0.0 && p < n) {
            if (std::find(order.begin(), order.end(), p) == order.end()) order.push_back(p);
            by_k.emplace_back(p, static_cast<int>(k), static_cast<int>(d), c);
          }
    auto extent_of = [&](size_t d) {
      double hi = up[d], lo = down[d];
      for (size_t k = 1; k < count; ++k) hi = PyMax(hi, up[k * ndim + d]);
      for (size_t k = 1; k < count; ++k) lo = PyMin(lo, down[k * ndim + d]);
      return PyMin(PyMax(hi - lo + 1.0, 1.0), shape[d]);
    };
    PVec<double> sizes(ndim, 0.0, &arena_);
    for (size_t d = 0; d < ndim; ++d) sizes[d] = extent_of(d);
    double total = Prod(sizes);
    Region r(&arena_);
    r.numel.assign(n, 1.0);
    for (int i = n - 1; i >= 0; --i) {
      bool any = false;
      double span = ext[i] - 1;
      for (auto& [p, k, d, c] : by_k) {
        if (p != i) continue;
        any = true;
        if (c > 0) {
          up[k * ndim + d] += c * span;
        } else {
          down[k * ndim + d] += c * span;
        }
      }
      if (!any) {
        r.numel[i] = total;
        continue;
      }
      for (auto& [p, k, d, c] : by_k)
        if (p == i) sizes[d] = extent_of(d);
      total = Prod(sizes);
      r.numel[i] = total;
    }
    for (int p : order)  // access.py: {p: [(d, c), ...] for p in by_k's first-use order}
      for (auto& [q, k, d, c] : by_k)
        if (q == p) r.by_loop.emplace_back(p, d, c);
    if (n) {
      r.size0.assign(sizes.begin(), sizes.end());
    } else {
      r.size0.assign(ndim, 1.0);
    }
    return r;
  }

  std::array<float, kAccessDim> Features(const Object* store, Stats* st) {
    arena_.release();  // the scratch of the previous store
    const std::vector<double>& ext = ext_;
    int n = static_cast<int>(ext.size());
    PVec<double> inner_prod(n + 1, 1.0, &arena_);
    for (int j = n - 1; j >= 0; --j) inner_prod[j] = inner_prod[j + 1] * ext[j];
    double prod = inner_prod[0];
    struct Sub {
      const std::string* name;
      int kind;
      int nbytes;
      PVec<double> numel;
      PVec<int> region;
      double min_stride, innermost_stride, prod_non_strided, continuous;
    };
    PVec<Sub> subs(&arena_);
    PVec<Access> accesses = Accesses(store, st);
    for (Access& a : accesses) {
      const BufferInfo& info = Info(a.buf);
      size_t ndim = info.shape.size();
      auto forms_of = [&](const Span& idx) {
        if (idx.size() < ndim) throw Fallback{"an access with fewer indices than its buffer's dimensions"};
        PVec<Form> f(&arena_);
        f.reserve(ndim);
        for (size_t d = 0; d < ndim; ++d) f.push_back(Lin(Raw(idx[d])));
        return f;
      };
      Region r = [&]() {
        if (a.multi.size() == 1) return OneAccess(forms_of(a.multi[0]), info.shape, ext);
        PVec<PVec<Form>> forms(&arena_);
        for (auto& idx : a.multi) forms.push_back(forms_of(idx));
        return ManyAccesses(forms, info.shape, ext);
      }();
      int inner = r.Inner();
      double min_stride = 0.0;
      bool first = true;
      for (auto& [p, d, c] : r.by_loop) {
        if (p != inner) continue;
        double s = std::fabs(c) * info.stride[d];
        if (first || s < min_stride) min_stride = s;
        first = false;
      }
      double continuous = 1.0;
      for (int d = static_cast<int>(ndim) - 1; d >= 0; --d)
        if (r.size0[d] == info.shape[d]) {
          continuous = info.shape[d] * info.nbytes;
          break;
        }
      PVec<int> region(&arena_);
      for (auto& [p, d, c] : r.by_loop)
        if (std::find(region.begin(), region.end(), p) == region.end()) region.push_back(p);
      subs.push_back(Sub{&info.name, a.kind, info.nbytes, PVec<double>(r.numel, &arena_), std::move(region), min_stride,
                         inner == n - 1 ? min_stride : 0.0, inner_prod[inner + 1], continuous});
    }
    int64_t touch = 0;
    for (auto& s : subs) touch += s.nbytes;
    double top_touch = static_cast<double>(touch);
    struct Row {
      double lines, size;
      const std::string* name;
      std::array<double, kPerBuffer> v;
    };
    PVec<Row> rows(&arena_);
    for (auto& s : subs) {
      int reuse_type = kNoReuse;
      double reuse_iter = 0.0, reuse_bytes = 0.0, reuse_ct = 0.0;
      for (int i = n - 1; i >= 0; --i) {
        if (std::find(s.region.begin(), s.region.end(), i) == s.region.end()) {
          reuse_type = kLoopRead;
          reuse_ct = ext[i];
          reuse_iter = inner_prod[i + 1];
          if (i == n - 1) {
            reuse_bytes = top_touch;
          } else {
            double t = 0.0;
            for (auto& o : subs) t += o.numel[i + 1] * o.nbytes;
            reuse_bytes = t;
          }
          break;
        }
      }
      double size = s.nbytes * prod;
      double unique, lines, unique_lines;
      if (n) {
        unique = s.numel[0] * s.nbytes;
        lines = PyMax(1.0, prod / s.prod_non_strided * PyMin(1.0, s.min_stride * s.nbytes / kCacheLine));
        unique_lines = PyMax(1.0, unique / PyMin(kCacheLine, s.continuous));
      } else {
        unique = lines = unique_lines = 1.0;
      }
      double proxy = reuse_ct > 0 ? reuse_ct : 0.5;
      rows.push_back(Row{lines, size, s.name,
                         {static_cast<double>(s.kind == kRead), static_cast<double>(s.kind == kWrite),
                          static_cast<double>(s.kind == kReadWrite), Log2p(size), Log2p(unique), Log2p(lines),
                          Log2p(unique_lines), static_cast<double>(reuse_type == kLoopRead), 0.0,
                          static_cast<double>(reuse_type == kNoReuse), Log2p(reuse_iter), Log2p(reuse_bytes),
                          Log2p(reuse_ct), Log2p(size / proxy), Log2p(unique / proxy), Log2p(lines / proxy),
                          Log2p(unique_lines / proxy), Log2p(s.innermost_stride)}});
    }
    std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
      if (-a.lines != -b.lines) return -a.lines < -b.lines;
      if (-a.size != -b.size) return -a.size < -b.size;
      return *a.name < *b.name;
    });
    std::array<float, kAccessDim> out{};
    for (size_t r = 0; r < rows.size() && r < kAccessBuffers; ++r)
      for (int j = 0; j < kPerBuffer; ++j) out[r * kPerBuffer + j] = static_cast<float>(rows[r].v[j]);
    return out;
  }

 public:
  // build_tree's own features of leaf i (OWN_FEATURES, in that order)
  std::array<double, kOwn> Own(const LeafRec& leaf, int64_t n_loops, int64_t n_leaves) {
    std::array<double, 5> per_kind{1.0, 1.0, 1.0, 1.0, 1.0};
    int64_t unroll = 0;
    for (int p : leaf.path) {
      int64_t e = std::max<int64_t>(extent[p], 1);
      per_kind[kind[p]] *= static_cast<double>(e);
      const std::string* value = AnnotationOf(p, "pragma_auto_unroll_max_step");
      int64_t u = 0;
      if (value != nullptr && !value->empty()) {
        char* end = nullptr;
        u = std::strtoll(value->c_str(), &end, 10);
        if (end == nullptr || *end != '\0') throw Fallback{"an unroll annotation that is not an integer"};
      }
      unroll = std::max(unroll, u);
    }
    double iters = 1.0;
    for (double k : per_kind) iters *= k;
    int inner = leaf.path.empty() ? -1 : leaf.path.back();
    const BufferInfo& info = Info(leaf.buffer);
    int64_t shape_elems = 1;
    for (double d : info.shape) shape_elems *= static_cast<int64_t>(d);
    bool reads_itself = false;
    for (const std::string* name : leaf.st.read_names) reads_itself = reads_itself || *name == info.name;
    std::array<double, kOwn> row{};
    int c = 0;
    row[c++] = static_cast<double>(leaf.path.size());
    for (double k : per_kind) row[c++] = std::log2(k);
    row[c++] = SignedLog(iters);
    row[c++] = inner >= 0 ? SignedLog(static_cast<double>(std::max<int64_t>(extent[inner], 0))) : 0.0;
    for (int k = 0; k < 5; ++k) row[c++] = inner >= 0 && kind[inner] == k ? 1.0 : 0.0;
    const Stats& st = leaf.st;
    for (int64_t v : {st.loads, st.add_sub, st.mul, st.div_mod, st.max_min, st.calls, st.select_cmp, st.casts})
      row[c++] = SignedLog(static_cast<double>(v));
    row[c++] = leaf.in_init ? 1.0 : 0.0;
    row[c++] = static_cast<double>(info.bits);
    row[c++] = static_cast<double>(info.lanes);
    row[c++] = SignedLog(static_cast<double>(shape_elems));
    row[c++] = reads_itself ? 1.0 : 0.0;
    row[c++] = SignedLog(static_cast<double>(unroll));
    row[c++] = SignedLog(static_cast<double>(n_leaves));
    row[c++] = SignedLog(static_cast<double>(n_loops));
    return row;
  }

  // the annotation value of node p under key, or nullptr
  const std::string* AnnotationOf(int p, const char* key) {
    if (ann_offset_.empty()) {
      ann_offset_.assign(ann_count.size() + 1, 0);
      for (size_t i = 0; i < ann_count.size(); ++i) ann_offset_[i + 1] = ann_offset_[i] + ann_count[i];
    }
    for (int64_t i = ann_offset_[p]; i < ann_offset_[p + 1]; ++i)
      if (anns[i].first == key) return &anns[i].second;
    return nullptr;
  }

 private:
  std::vector<int64_t> ann_offset_;
};

template <typename T>
void Put(std::string* out, const T* data, size_t count) {
  out->append(reinterpret_cast<const char*>(data), sizeof(T) * count);
  while (out->size() % 8) out->push_back('\0');
}

ffi::Bytes WalkFunc(ffi::ObjectRef func) {
  Walk w;
  try {
    w.Add(-1, kRoot, 0, "");
    std::vector<int> path;
    w.Visit(Obj(func.get(), f_body), 0, path, false);
    if (w.leaves.empty()) throw Unsupported{"the program has no BufferStore statement (nothing to featurize)"};
    int64_t n_loops = 0;
    for (int64_t k : w.kind) n_loops += (k >= 0 && k != kLeaf) ? 1 : 0;
    size_t n = w.parent.size(), l = w.leaves.size();
    std::vector<float> feats(l * kFeat);
    std::vector<int64_t> position(l);
    for (size_t i = 0; i < l; ++i) {
      auto own = w.Own(w.leaves[i], n_loops, static_cast<int64_t>(l));
      for (int j = 0; j < kOwn; ++j) feats[i * kFeat + j] = static_cast<float>(own[j]);
      for (int j = 0; j < kAccessDim; ++j) feats[i * kFeat + kOwn + j] = w.access_rows[i][j];
      position[i] = w.leaves[i].node;
    }
    std::string strings;
    for (auto& s : w.names) strings.append(s).push_back('\0');
    for (auto& leaf : w.leaves) strings.append(w.names[leaf.node]).push_back('\0');
    for (auto& [k, v] : w.anns) strings.append(k).append(1, '\0').append(v).push_back('\0');
    std::string out("P\0\0\0\0\0\0\0", 8);
    int64_t header[8] = {static_cast<int64_t>(n), static_cast<int64_t>(l), w.dropped,
                         static_cast<int64_t>(strings.size()), static_cast<int64_t>(w.anns.size()), 0, 0, 0};
    Put(&out, header, 8);
    Put(&out, w.parent.data(), n);
    Put(&out, w.kind.data(), n);
    Put(&out, w.extent.data(), n);
    Put(&out, w.ann_count.data(), n);
    Put(&out, position.data(), l);
    Put(&out, feats.data(), feats.size());
    out.append(strings);
    return ffi::Bytes(out);
  } catch (const Unsupported& e) {
    return ffi::Bytes("E" + e.why);
  } catch (const Fallback& e) {
    return ffi::Bytes("F" + e.why);
  }
}

}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(cdmpp_walk, WalkFunc);
