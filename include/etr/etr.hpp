/* etr/etr.hpp — C++ helpers over etr.h: an exception-safe guard for one op, value
 * builders, thread naming and a trace that closes itself. Header-only; C++17 or later
 * (std::uncaught_exceptions).
 *
 *   etr::Trace trace("trace.json");              // opened and enabled; closed at scope end
 *   {
 *     etr::Op op("aten::add", {etr::value(x), etr::value(int64_t{1})});  // begins here
 *     run();                                      // an exception thrown here ends the op
 *     op.set_outputs({etr::value(out)});          //   marked failed (attr etr_failed)
 *   }                                             // ends here
 *
 * An Op is neither copyable nor movable: etr keys the open op by the record's address, so
 * the guard must stay where it was made (on the stack, as a member). Values point to what
 * they describe (strings, tensors): keep that alive until the call that reads it returns,
 * inputs until the guard's constructor (or begin) returns, outputs until its destructor.
 */
#ifndef ETR_ETR_HPP
#define ETR_ETR_HPP

#if defined(__cplusplus) && __cplusplus < 201703L && !defined(_MSVC_LANG)
#error "etr/etr.hpp needs C++17 or later (std::uncaught_exceptions); etr/etr.h works from any C++"
#endif

#include <cstddef>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include "etr/etr.h"

namespace etr {

/* ---- values ---- */

inline etr_value none() noexcept { return etr_value_none(); }
inline etr_value value(bool b) noexcept { return etr_value_bool(b); }
inline etr_value value(int v) noexcept { return etr_value_int(v); }
inline etr_value value(long v) noexcept { return etr_value_int(v); }
inline etr_value value(long long v) noexcept { return etr_value_int(v); }
inline etr_value value(unsigned v) noexcept { return etr_value_int(v); }
/* (above INT64_MAX: written as INT64_MAX) */
inline etr_value value(unsigned long v) noexcept {
  return etr_value_int(v > static_cast<unsigned long>(INT64_MAX) ? INT64_MAX
                                                                 : static_cast<int64_t>(v));
}
inline etr_value value(unsigned long long v) noexcept {
  return etr_value_int(v > static_cast<unsigned long long>(INT64_MAX) ? INT64_MAX
                                                                      : static_cast<int64_t>(v));
}
inline etr_value value(double d) noexcept { return etr_value_double(d); }
inline etr_value value(const char *s) noexcept { return etr_value_string(s); }
/* The string is referenced, not copied: it must outlive the call that reads the value. */
inline etr_value value(const std::string &s) noexcept {
  return etr_value_string_n(s.data(), static_cast<uint32_t>(s.size()));
}
inline etr_value value(const etr_tensor &t) noexcept { return etr_value_tensor(&t); }
inline etr_value device(const char *name) noexcept { return etr_value_device(name); }
inline etr_value object(const char *kind) noexcept { return etr_value_object(kind); }
/* Lists and tuples reference their items: keep the vector alive as long as the value. */
inline etr_value list(const std::vector<etr_value> &items) noexcept {
  return etr_value_list(items.data(), static_cast<uint32_t>(items.size()));
}
inline etr_value tuple(const std::vector<etr_value> &items) noexcept {
  return etr_value_tuple(items.data(), static_cast<uint32_t>(items.size()));
}

/* ---- one operator call ---- */

class Op {
 public:
  struct Deferred {};
  /* Ready to take inputs (needs_inputs, set_inputs, schema); begin() starts the op. */
  static constexpr Deferred deferred{};

  /* Begins the op, without inputs. */
  explicit Op(const char *name, etr_scope scope = ETR_SCOPE_FUNCTION) noexcept
      : exceptions_(std::uncaught_exceptions()) {
    etr_record_init(&rec_, name, scope);
    etr_record_begin(&rec_);
  }
  /* Begins the op with these inputs (read before the constructor returns). */
  Op(const char *name, std::initializer_list<etr_value> inputs,
     etr_scope scope = ETR_SCOPE_FUNCTION) noexcept
      : exceptions_(std::uncaught_exceptions()) {
    etr_record_init(&rec_, name, scope);
    if (etr_record_needs_inputs(&rec_)) set_inputs(inputs.begin(), inputs.size());
    etr_record_begin(&rec_);
  }
  Op(Deferred, const char *name, etr_scope scope = ETR_SCOPE_FUNCTION) noexcept
      : exceptions_(std::uncaught_exceptions()), begun_(false) {
    etr_record_init(&rec_, name, scope);
  }

  Op(const Op &) = delete;
  Op &operator=(const Op &) = delete;
  Op(Op &&) = delete;
  Op &operator=(Op &&) = delete;

  /* Ends the op; when an exception thrown after the guard was made is unwinding through it,
   * the op is written marked failed (etr_record_end_failed). */
  ~Op() {
    if (!begun_) return; /* (a deferred guard never begun: no op, and no misuse) */
    if (std::uncaught_exceptions() > exceptions_)
      etr_record_end_failed(&rec_);
    else
      etr_record_end(&rec_);
  }

  /* True when an observer sees this op: only then is it worth building values. */
  bool active() const noexcept { return etr_record_is_active(&rec_); }
  bool needs_inputs() const noexcept { return etr_record_needs_inputs(&rec_); }
  bool needs_outputs() const noexcept { return etr_record_needs_outputs(&rec_); }

  /* Before begin (a deferred guard): the schema string and the inputs (read by begin). */
  Op &set_schema(const char *schema) noexcept {
    if (active()) rec_.schema = schema;
    return *this;
  }
  Op &set_inputs(const etr_value *v, std::size_t n) noexcept {
    if (active()) {
      rec_.inputs = v;
      rec_.n_inputs = static_cast<uint32_t>(n);
    }
    return *this;
  }
  /* Sequence number and forward thread, for autograd-style backward ops. */
  Op &set_sequence(int64_t seq_nr, uint64_t fw_tid = 0) noexcept {
    if (active()) {
      rec_.seq_nr = seq_nr;
      rec_.fw_tid = fw_tid;
    }
    return *this;
  }
  void begin() noexcept {
    begun_ = true;
    etr_record_begin(&rec_);
  }

  /* The outputs, read when the guard ends: the list is copied (the values' referents are
   * not, keep them alive until then). */
  void set_outputs(std::initializer_list<etr_value> outputs) {
    if (!needs_outputs()) return;
    outputs_.assign(outputs.begin(), outputs.end());
    rec_.outputs = outputs_.data();
    rec_.n_outputs = static_cast<uint32_t>(outputs_.size());
  }
  void set_outputs(const etr_value *v, std::size_t n) noexcept {
    if (!needs_outputs()) return;
    rec_.outputs = v;
    rec_.n_outputs = static_cast<uint32_t>(n);
  }

  /* The C record, for what the helpers above do not cover (kernel, collective). */
  etr_record *record() noexcept { return &rec_; }

 private:
  etr_record rec_;
  int exceptions_;
  bool begun_ = true;
  std::vector<etr_value> outputs_;
};

/* ---- threads ---- */

/* Name the calling thread's node in traces (before its first recorded op). */
inline int set_thread_name(const std::string &name) noexcept {
  return etr_thread_set_name(name.c_str());
}
inline uint64_t thread_id() noexcept { return etr_thread_id(); }

/* ---- a trace ---- */

/* Opens path and enables recording; closes the trace (writing its end) when destroyed.
 * ok() tells whether it opened; error() gives the ETR_E* code. */
class Trace {
 public:
  explicit Trace(const char *path, const etr_trace_options *opt = nullptr) noexcept {
    err_ = etr_trace_open(path, opt, &t_);
    if (err_ == 0) err_ = etr_trace_enable(t_);
  }
  explicit Trace(const std::string &path, const etr_trace_options *opt = nullptr) noexcept
      : Trace(path.c_str(), opt) {}
  Trace(const Trace &) = delete;
  Trace &operator=(const Trace &) = delete;
  ~Trace() { close(); }

  bool ok() const noexcept { return t_ != nullptr && err_ == 0; }
  int error() const noexcept { return err_; }
  etr_trace *get() noexcept { return t_; }
  /* Closes now (0 or an ETR_E* code); the destructor then does nothing. */
  int close() noexcept {
    if (t_ == nullptr) return 0;
    int rc = etr_trace_close(t_);
    t_ = nullptr;
    return rc;
  }

 private:
  etr_trace *t_ = nullptr;
  int err_ = 0;
};

}  // namespace etr

#endif /* ETR_ETR_HPP */
