// The strict torch pickle reader (torch_pickle.h): a stack machine over the
// opcodes of pickle protocols 2-4 that torch.save (protocol 2) and Python's
// pickle emit for plain data. Objects are never constructed: GLOBAL pushes
// a name from the allow-list, REDUCE and NEWOBJ either rebuild a tensor,
// an OrderedDict, a set or a size, or record the call as an object value.
#include "core/checkpoint/torch_pickle.h"

#include "core/checkpoint/zip_archive.h"

#include <cstring>
#include <map>
#include <set>

namespace dscore::checkpoint {
namespace {

constexpr size_t kMaxStack = 1u << 20;
constexpr size_t kMaxMemo = 1u << 24;

// Storage classes and dtypes: the element type each names.
const std::map<std::string, dscore_dtype, std::less<>>& torch_dtypes() {
  static const std::map<std::string, dscore_dtype, std::less<>> names = {
      {"torch.FloatStorage", DSCORE_DTYPE_F32},     {"torch.float32", DSCORE_DTYPE_F32},
      {"torch.HalfStorage", DSCORE_DTYPE_F16},      {"torch.float16", DSCORE_DTYPE_F16},
      {"torch.BFloat16Storage", DSCORE_DTYPE_BF16}, {"torch.bfloat16", DSCORE_DTYPE_BF16},
      {"torch.DoubleStorage", DSCORE_DTYPE_F64},    {"torch.float64", DSCORE_DTYPE_F64},
      {"torch.LongStorage", DSCORE_DTYPE_I64},      {"torch.int64", DSCORE_DTYPE_I64},
      {"torch.IntStorage", DSCORE_DTYPE_I32},       {"torch.int32", DSCORE_DTYPE_I32},
      {"torch.ShortStorage", DSCORE_DTYPE_I16},     {"torch.int16", DSCORE_DTYPE_I16},
      {"torch.CharStorage", DSCORE_DTYPE_I8},       {"torch.int8", DSCORE_DTYPE_I8},
      {"torch.ByteStorage", DSCORE_DTYPE_U8},       {"torch.uint8", DSCORE_DTYPE_U8},
      {"torch.BoolStorage", DSCORE_DTYPE_BOOL},     {"torch.bool", DSCORE_DTYPE_BOOL},
  };
  return names;
}

// Callables rebuilt here; every other allowed global becomes a recorded object.
constexpr std::string_view kRebuildTensor = "torch._utils._rebuild_tensor";
constexpr std::string_view kRebuildTensorV2 = "torch._utils._rebuild_tensor_v2";
constexpr std::string_view kRebuildParameter = "torch._utils._rebuild_parameter";
constexpr std::string_view kRebuildParameterWithState =
    "torch._utils._rebuild_parameter_with_state";
// (rebuild function, tensor type, its arguments, extra state): a tensor
// whose Python object carried attributes (DeepSpeed's ds_id); they are dropped.
constexpr std::string_view kRebuildFromType = "torch._tensor._rebuild_from_type_v2";

// Classes kept as data: what DeepSpeed's checkpoints hold besides tensors
// and containers (their names as pickled).
const std::set<std::string, std::less<>>& recorded_classes() {
  static const std::set<std::string, std::less<>> names = {
      "torch.Size",
      "torch.device",
      "collections.OrderedDict",
      "builtins.set",
      "builtins.frozenset",
      "deepspeed.runtime.fp16.loss_scaler.LossScaler",
      "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
      "deepspeed.runtime.zero.config.ZeroStageEnum",
      "deepspeed.utils.tensor_fragment.fragment_address",
      "torch.Tensor",  // only as _rebuild_from_type_v2's type argument
  };
  return names;
}

PickleRef make(PickleValue::Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

class Machine {
 public:
  Machine(std::string_view bytes, const std::string& where) : in_(bytes), where_(where) {}

  Result<PickleRef> run() {
    while (true) {
      if (at_ >= in_.size()) return truncated();
      const auto op = static_cast<unsigned char>(in_[at_++]);
      if (op == '.') break;  // STOP
      DSCORE_RETURN_IF_ERROR(step(op));
      if (stack_.size() > kMaxStack) return malformed("the stack grows past its limit");
    }
    if (stack_.size() != 1 || !marks_.empty()) return malformed("STOP leaves an unbalanced stack");
    return stack_.back();
  }

 private:
  Status truncated() const {
    return data_loss(where_ + ": the pickle ends at byte " + std::to_string(in_.size()) +
                     " before its STOP: the file is truncated");
  }
  Status malformed(const std::string& what) const {
    return data_loss(where_ + ": malformed pickle at byte " + std::to_string(at_) + ": " + what);
  }
  Status refused(const std::string& what) const {
    return invalid_argument(where_ + ": refused: " + what +
                            ". dscore reads only tensors, plain containers and an allow-list of "
                            "classes from a torch.save file, and never runs its code; a file "
                            "that needs more is not a checkpoint dscore can import");
  }

  Result<uint64_t> fixed(int bytes) {
    if (in_.size() - at_ < static_cast<size_t>(bytes)) return truncated();
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(in_[at_ + i]);
    at_ += bytes;
    return v;
  }
  Result<std::string> take(uint64_t bytes) {
    if (in_.size() - at_ < bytes) return truncated();
    std::string s(in_.substr(at_, bytes));
    at_ += bytes;
    return s;
  }
  Result<std::string> line() {
    const size_t end = in_.find('\n', at_);
    if (end == std::string_view::npos) return truncated();
    std::string s(in_.substr(at_, end - at_));
    at_ = end + 1;
    return s;
  }
  Result<PickleRef> pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()))
      return malformed("an opcode pops an empty stack");
    PickleRef v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Result<PickleRef> top() {
    if (stack_.empty()) return malformed("an opcode needs a value and the stack is empty");
    return stack_.back();
  }
  // The values since the last MARK, removing them and the mark.
  Result<std::vector<PickleRef>> pop_to_mark() {
    if (marks_.empty()) return malformed("no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleRef> out(stack_.begin() + static_cast<ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return out;
  }
  void push(PickleRef v) { stack_.push_back(std::move(v)); }
  Status memo_put(uint64_t key) {
    if (stack_.empty()) return malformed("memoizing an empty stack");
    if (memo_.size() >= kMaxMemo && !memo_.count(key)) return malformed("too many memo entries");
    memo_[key] = stack_.back();
    return Status::Ok();
  }
  Status memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return malformed("memo key " + std::to_string(key) + " is unset");
    push(it->second);
    return Status::Ok();
  }
  Status push_string(PickleValue::Kind kind, uint64_t length) {
    DSCORE_ASSIGN_OR_RETURN(std::string s, take(length));
    PickleRef v = make(kind);
    v->text = std::move(s);
    push(std::move(v));
    return Status::Ok();
  }
  Status push_int(int64_t value) {
    PickleRef v = make(PickleValue::Kind::kInt);
    v->integer = value;
    push(std::move(v));
    return Status::Ok();
  }
  Status push_global(const std::string& module, const std::string& name) {
    const std::string qualified = module + "." + name;
    if (!pickle_global_allowed(qualified))
      return refused("the pickle names the global " + printable(qualified));
    PickleRef v = make(PickleValue::Kind::kGlobal);
    v->text = qualified;
    auto dtype = torch_dtypes().find(qualified);
    if (dtype != torch_dtypes().end()) {
      v->tensor.dtype = dtype->second;
      v->tensor.dtype_name = name;
    }
    push(std::move(v));
    return Status::Ok();
  }
  Status set_items(const PickleRef& target, const std::vector<PickleRef>& flat) {
    if (flat.size() % 2 != 0) return malformed("SETITEMS with an odd count");
    if (!target->is(PickleValue::Kind::kDict)) return malformed("SETITEM on " + target->describe());
    for (size_t i = 0; i < flat.size(); i += 2) target->dict.emplace_back(flat[i], flat[i + 1]);
    return Status::Ok();
  }
  Status append_items(const PickleRef& target, const std::vector<PickleRef>& items) {
    if (!target->is(PickleValue::Kind::kList) && !target->is(PickleValue::Kind::kSet))
      return malformed("APPEND to " + target->describe());
    target->items.insert(target->items.end(), items.begin(), items.end());
    return Status::Ok();
  }
  Result<std::vector<int64_t>> int_tuple(const PickleRef& v, const char* what) {
    if (!v->is(PickleValue::Kind::kTuple)) return malformed(std::string(what) + " is not a tuple");
    std::vector<int64_t> out;
    for (const PickleRef& item : v->items) {
      if (!item->is(PickleValue::Kind::kInt))
        return malformed(std::string(what) + " holds a non-int");
      out.push_back(item->integer);
    }
    return out;
  }

  // REDUCE / NEWOBJ: callable(args).
  Result<PickleRef> call(const PickleRef& callable, const PickleRef& args) {
    if (!callable->is(PickleValue::Kind::kGlobal))
      return refused("the pickle calls " + callable->describe() + ", not an allowed class");
    if (!args->is(PickleValue::Kind::kTuple)) return malformed("call arguments are not a tuple");
    const std::string& name = callable->text;
    const std::vector<PickleRef>& a = args->items;
    if (name == kRebuildTensor || name == kRebuildTensorV2) {
      if (a.size() < 4 || !a[0]->is(PickleValue::Kind::kStorage) ||
          !a[1]->is(PickleValue::Kind::kInt))
        return malformed(name + " with unexpected arguments");
      PickleRef t = make(PickleValue::Kind::kTensor);
      t->tensor = a[0]->tensor;
      t->tensor.storage_offset = a[1]->integer;
      DSCORE_ASSIGN_OR_RETURN(t->tensor.shape, int_tuple(a[2], "a tensor's size"));
      DSCORE_ASSIGN_OR_RETURN(t->tensor.stride, int_tuple(a[3], "a tensor's stride"));
      if (t->tensor.shape.size() != t->tensor.stride.size())
        return malformed("a tensor's size and stride differ in length");
      for (int64_t d : t->tensor.shape)
        if (d < 0) return malformed("a tensor has a negative size");
      return t;
    }
    if (name == kRebuildFromType) {
      if (a.size() < 3 || !a[0]->is(PickleValue::Kind::kGlobal) ||
          (a[0]->text != kRebuildTensor && a[0]->text != kRebuildTensorV2) ||
          !a[1]->is(PickleValue::Kind::kGlobal) || a[1]->text != "torch.Tensor")
        return refused(std::string(kRebuildFromType) + " of anything but a plain torch.Tensor");
      return call(a[0], a[2]);
    }
    if (name == kRebuildParameter || name == kRebuildParameterWithState) {
      if (a.empty() || !a[0]->is(PickleValue::Kind::kTensor))
        return malformed(name + " without a tensor");
      return a[0];
    }
    if (name == "collections.OrderedDict") {
      PickleRef d = make(PickleValue::Kind::kDict);
      if (!a.empty()) return refused("OrderedDict built from arguments");
      return d;
    }
    if (name == "torch.Size" || name == "builtins.set" || name == "builtins.frozenset") {
      PickleRef out =
          make(name == "torch.Size" ? PickleValue::Kind::kTuple : PickleValue::Kind::kSet);
      if (a.size() == 1 &&
          (a[0]->is(PickleValue::Kind::kTuple) || a[0]->is(PickleValue::Kind::kList)))
        out->items = a[0]->items;
      else if (!a.empty())
        return malformed(name + " with unexpected arguments");
      return out;
    }
    if (torch_dtypes().count(name) != 0) return refused("the pickle calls the dtype " + name);
    PickleRef object = make(PickleValue::Kind::kObject);
    object->text = name;
    object->items = a;
    return object;
  }

  Status step(unsigned char op) {
    using K = PickleValue::Kind;
    switch (op) {
      case 0x80:  // PROTO
      {
        DSCORE_ASSIGN_OR_RETURN(uint64_t protocol, fixed(1));
        if (protocol < 2 || protocol > 5)
          return refused("pickle protocol " + std::to_string(protocol));
        return Status::Ok();
      }
      case 0x95:  // FRAME: a length prefix, nothing to do
        return fixed(8).status();
      case '(':
        marks_.push_back(stack_.size());
        return Status::Ok();
      case '}':
        push(make(K::kDict));
        return Status::Ok();
      case ']':
        push(make(K::kList));
        return Status::Ok();
      case ')':
        push(make(K::kTuple));
        return Status::Ok();
      case 0x8f:
        push(make(K::kSet));
        return Status::Ok();  // EMPTY_SET
      case 'N':
        push(make(K::kNone));
        return Status::Ok();
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        PickleRef v = make(K::kBool);
        v->boolean = op == 0x88;
        push(std::move(v));
        return Status::Ok();
      }
      case 'J': {  // BININT
        DSCORE_ASSIGN_OR_RETURN(uint64_t v, fixed(4));
        return push_int(static_cast<int32_t>(static_cast<uint32_t>(v)));
      }
      case 'K': {  // BININT1
        DSCORE_ASSIGN_OR_RETURN(uint64_t v, fixed(1));
        return push_int(static_cast<int64_t>(v));
      }
      case 'M': {  // BININT2
        DSCORE_ASSIGN_OR_RETURN(uint64_t v, fixed(2));
        return push_int(static_cast<int64_t>(v));
      }
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        DSCORE_ASSIGN_OR_RETURN(uint64_t n, fixed(1));
        if (n > 8) return refused("an integer of " + std::to_string(n) + " bytes (over 64 bits)");
        if (n == 0) return push_int(0);
        DSCORE_ASSIGN_OR_RETURN(uint64_t v, fixed(static_cast<int>(n)));
        if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t{0} << (8 * n);  // sign-extend
        return push_int(static_cast<int64_t>(v));
      }
      case 'G': {  // BINFLOAT: big-endian double
        if (in_.size() - at_ < 8) return truncated();
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<unsigned char>(in_[at_ + i]);
        at_ += 8;
        PickleRef v = make(K::kFloat);
        std::memcpy(&v->real, &bits, 8);
        push(std::move(v));
        return Status::Ok();
      }
      case 'X': {  // BINUNICODE
        DSCORE_ASSIGN_OR_RETURN(uint64_t n, fixed(4));
        return push_string(K::kString, n);
      }
      case 0x8c: {  // SHORT_BINUNICODE
        DSCORE_ASSIGN_OR_RETURN(uint64_t n, fixed(1));
        return push_string(K::kString, n);
      }
      case 0x8d: {  // BINUNICODE8
        DSCORE_ASSIGN_OR_RETURN(uint64_t n, fixed(8));
        return push_string(K::kString, n);
      }
      case 'T': {  // BINSTRING (protocol 2 bytes-as-str)
        DSCORE_ASSIGN_OR_RETURN(uint64_t n, fixed(4));
        return push_string(K::kString, n);
      }
      case 'U': {  // SHORT_BINSTRING
        DSCORE_ASSIGN_OR_RETURN(uint64_t n, fixed(1));
        return push_string(K::kString, n);
      }
      case 'B': {  // BINBYTES
        DSCORE_ASSIGN_OR_RETURN(uint64_t n, fixed(4));
        return push_string(K::kBytes, n);
      }
      case 'C': {  // SHORT_BINBYTES
        DSCORE_ASSIGN_OR_RETURN(uint64_t n, fixed(1));
        return push_string(K::kBytes, n);
      }
      case 'q': {  // BINPUT
        DSCORE_ASSIGN_OR_RETURN(uint64_t k, fixed(1));
        return memo_put(k);
      }
      case 'r': {  // LONG_BINPUT
        DSCORE_ASSIGN_OR_RETURN(uint64_t k, fixed(4));
        return memo_put(k);
      }
      case 0x94:
        return memo_put(memo_.size());  // MEMOIZE
      case 'h': {                       // BINGET
        DSCORE_ASSIGN_OR_RETURN(uint64_t k, fixed(1));
        return memo_get(k);
      }
      case 'j': {  // LONG_BINGET
        DSCORE_ASSIGN_OR_RETURN(uint64_t k, fixed(4));
        return memo_get(k);
      }
      case 't': {  // TUPLE
        DSCORE_ASSIGN_OR_RETURN(std::vector<PickleRef> items, pop_to_mark());
        PickleRef v = make(K::kTuple);
        v->items = std::move(items);
        push(std::move(v));
        return Status::Ok();
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1-3
        PickleRef v = make(K::kTuple);
        v->items.resize(op - 0x84);
        for (size_t i = v->items.size(); i-- > 0;) {
          DSCORE_ASSIGN_OR_RETURN(v->items[i], pop());
        }
        push(std::move(v));
        return Status::Ok();
      }
      case 'l': {  // LIST
        DSCORE_ASSIGN_OR_RETURN(std::vector<PickleRef> items, pop_to_mark());
        PickleRef v = make(K::kList);
        v->items = std::move(items);
        push(std::move(v));
        return Status::Ok();
      }
      case 'd': {  // DICT
        DSCORE_ASSIGN_OR_RETURN(std::vector<PickleRef> flat, pop_to_mark());
        PickleRef v = make(K::kDict);
        DSCORE_RETURN_IF_ERROR(set_items(v, flat));
        push(std::move(v));
        return Status::Ok();
      }
      case 0x91: {  // FROZENSET
        DSCORE_ASSIGN_OR_RETURN(std::vector<PickleRef> items, pop_to_mark());
        PickleRef v = make(K::kSet);
        v->items = std::move(items);
        push(std::move(v));
        return Status::Ok();
      }
      case 'a': {  // APPEND
        DSCORE_ASSIGN_OR_RETURN(PickleRef item, pop());
        DSCORE_ASSIGN_OR_RETURN(PickleRef list, top());
        return append_items(list, {item});
      }
      case 'e':
      case 0x90: {  // APPENDS, ADDITEMS
        DSCORE_ASSIGN_OR_RETURN(std::vector<PickleRef> items, pop_to_mark());
        DSCORE_ASSIGN_OR_RETURN(PickleRef list, top());
        return append_items(list, items);
      }
      case 's': {  // SETITEM
        DSCORE_ASSIGN_OR_RETURN(PickleRef value, pop());
        DSCORE_ASSIGN_OR_RETURN(PickleRef key, pop());
        DSCORE_ASSIGN_OR_RETURN(PickleRef dict, top());
        return set_items(dict, {key, value});
      }
      case 'u': {  // SETITEMS
        DSCORE_ASSIGN_OR_RETURN(std::vector<PickleRef> flat, pop_to_mark());
        DSCORE_ASSIGN_OR_RETURN(PickleRef dict, top());
        return set_items(dict, flat);
      }
      case '0':
        return pop().status();  // POP
      case '1':
        return pop_to_mark().status();  // POP_MARK
      case '2': {                       // DUP
        DSCORE_ASSIGN_OR_RETURN(PickleRef v, top());
        push(v);
        return Status::Ok();
      }
      case 'c': {  // GLOBAL "module\nname\n"
        DSCORE_ASSIGN_OR_RETURN(std::string module, line());
        DSCORE_ASSIGN_OR_RETURN(std::string name, line());
        return push_global(module, name);
      }
      case 0x93: {  // STACK_GLOBAL
        DSCORE_ASSIGN_OR_RETURN(PickleRef name, pop());
        DSCORE_ASSIGN_OR_RETURN(PickleRef module, pop());
        if (!name->is(K::kString) || !module->is(K::kString))
          return malformed("STACK_GLOBAL without two strings");
        return push_global(module->text, name->text);
      }
      case 'R':     // REDUCE
      case 0x81: {  // NEWOBJ
        DSCORE_ASSIGN_OR_RETURN(PickleRef args, pop());
        DSCORE_ASSIGN_OR_RETURN(PickleRef callable, pop());
        DSCORE_ASSIGN_OR_RETURN(PickleRef v, call(callable, args));
        push(std::move(v));
        return Status::Ok();
      }
      case 'b': {  // BUILD
        DSCORE_ASSIGN_OR_RETURN(PickleRef state, pop());
        DSCORE_ASSIGN_OR_RETURN(PickleRef target, top());
        if (target->is(K::kTensor) || target->is(K::kDict)) return Status::Ok();  // no fields kept
        if (!target->is(K::kObject)) return malformed("BUILD on " + target->describe());
        target->state = state;
        if (state->is(K::kDict)) target->dict = state->dict;
        return Status::Ok();
      }
      case 'Q': {  // BINPERSID: ('storage', storage type, key, location, numel)
        DSCORE_ASSIGN_OR_RETURN(PickleRef pid, pop());
        const auto& p = pid->items;
        if (!pid->is(K::kTuple) || p.size() < 5 || !p[0]->is(K::kString) ||
            p[0]->text != "storage" || !p[1]->is(K::kGlobal) || !p[2]->is(K::kString))
          return refused("a persistent id that is not a torch storage (" + pid->describe() + ")");
        if (p[1]->tensor.dtype == DSCORE_DTYPE_INVALID)
          return refused("the storage type " + printable(p[1]->text));
        if (p[2]->text.empty() || p[2]->text.find('/') != std::string::npos ||
            p[2]->text.find("..") != std::string::npos)
          return malformed("a storage key '" + printable(p[2]->text) +
                           "' that is not a plain name");
        PickleRef storage = make(K::kStorage);
        storage->tensor.dtype = p[1]->tensor.dtype;
        storage->tensor.dtype_name = p[1]->tensor.dtype_name;
        storage->tensor.storage_key = p[2]->text;
        push(std::move(storage));
        return Status::Ok();
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        return refused(std::string("the pickle opcode ") + hex +
                       " (outside the subset torch.save writes)");
      }
    }
  }

  std::string_view in_;
  const std::string& where_;
  size_t at_ = 0;
  std::vector<PickleRef> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PickleRef> memo_;
};

}  // namespace

int64_t TorchTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TorchTensor::contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && stride[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

const PickleValue* PickleValue::get(std::string_view key) const {
  for (const auto& [k, v] : dict)
    if (k->kind == Kind::kString && k->text == key) return v.get();
  return nullptr;
}

const PickleValue* PickleValue::get(int64_t key) const {
  for (const auto& [k, v] : dict)
    if (k->kind == Kind::kInt && k->integer == key) return v.get();
  return nullptr;
}

std::string PickleValue::describe() const {
  switch (kind) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return boolean ? "True" : "False";
    case Kind::kInt:
      return "the int " + std::to_string(integer);
    case Kind::kFloat:
      return "a float";
    case Kind::kString:
      return "the string '" + printable(text) + "'";
    case Kind::kBytes:
      return "bytes";
    case Kind::kList:
      return "a list of " + std::to_string(items.size());
    case Kind::kTuple:
      return "a tuple of " + std::to_string(items.size());
    case Kind::kSet:
      return "a set";
    case Kind::kDict:
      return "a dict";
    case Kind::kGlobal:
      return "the global " + text;
    case Kind::kObject:
      return "a " + text + " object";
    case Kind::kTensor: {
      std::string s = "a tensor [";
      for (size_t i = 0; i < tensor.shape.size(); ++i)
        s += (i ? ", " : "") + std::to_string(tensor.shape[i]);
      return s + "] " + tensor.dtype_name;
    }
    case Kind::kStorage:
      return "a storage";
  }
  return "a value";
}

bool pickle_global_allowed(std::string_view name) {
  return name == kRebuildTensor || name == kRebuildTensorV2 || name == kRebuildParameter ||
         name == kRebuildParameterWithState || name == kRebuildFromType ||
         torch_dtypes().count(name) != 0 || recorded_classes().count(name) != 0;
}

Result<PickleRef> parse_torch_pickle(std::string_view bytes, const std::string& where) {
  return Machine(bytes, where).run();
}

}  // namespace dscore::checkpoint
