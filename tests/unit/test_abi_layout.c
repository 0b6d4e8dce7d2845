/* tests/unit/test_abi_layout.c — the layout of every public struct, frozen (x86-64, LP64).
 *
 * A program built against one etr header runs against later libetr builds, so a struct's
 * existing fields never move: new fields go at the end of structs that carry their size
 * (struct_size, or etr_record's _size), and no struct is embedded in another by value. This
 * test fails when a field moves or a struct shrinks; one that grows at its end updates the
 * size line here on purpose. To regenerate the tables after an intended change:
 *   clang -Iinclude -Xclang -fdump-record-layouts -fsyntax-only (a file taking each sizeof)
 */
#include <stddef.h>
#include <stdio.h>

#include <etr/etr.h>

#if defined(__x86_64__) && defined(__LP64__)
#define F(type, field, off) \
  { #type, #field, offsetof(type, field), off }
static const struct {
  const char *type, *field;
  size_t got, want;
} fields[] = {
    F(etr_value, kind, 0),
    F(etr_value, count, 4),
    F(etr_value, u, 8),
    F(etr_record, name, 0),
    F(etr_record, scope, 8),
    F(etr_record, n_inputs, 12),
    F(etr_record, seq_nr, 16),
    F(etr_record, fw_tid, 24),
    F(etr_record, schema, 32),
    F(etr_record, inputs, 40),
    F(etr_record, outputs, 48),
    F(etr_record, n_outputs, 56),
    F(etr_record, _needs, 60),
    F(etr_record, kernel, 64),
    F(etr_record, collective, 72),
    F(etr_record, _active, 80),
    F(etr_record, _epoch, 88),
    F(etr_record, _rf_id, 96),
    F(etr_record, _state, 104),
    F(etr_record, _tid, 108),
    F(etr_record, _size, 112),
    F(etr_process_group, struct_size, 0),
    F(etr_process_group, name, 8),
    F(etr_process_group, desc, 16),
    F(etr_process_group, backend, 24),
    F(etr_process_group, ranks, 32),
    F(etr_process_group, n_ranks, 40),
    F(etr_process_group, size, 48),
    F(etr_observer_options, struct_size, 0),
    F(etr_observer_options, enter, 8),
    F(etr_observer_options, exit, 16),
    F(etr_observer_options, user, 24),
    F(etr_observer_options, needs, 32),
    F(etr_observer_options, scopes, 36),
    F(etr_observer_options, sample_probability, 40),
    F(etr_observer_options, thread_local_only, 48),
    F(etr_observer_options, start_disabled, 49),
    F(etr_registry_stats, struct_size, 0),
    F(etr_registry_stats, records_observed, 8),
    F(etr_registry_stats, ends_without_begin, 16),
    F(etr_registry_stats, begins_repeated, 24),
    F(etr_registry_stats, records_in_callbacks, 32),
    F(etr_registry_stats, observers, 40),
    F(etr_kernel_info, backend, 0),
    F(etr_kernel_info, file, 8),
    F(etr_kernel_info, grid, 16),
    F(etr_kernel_info, stream, 32),
    F(etr_collective_info, name, 0),
    F(etr_collective_info, dtype, 8),
    F(etr_collective_info, in_msg_nelems, 16),
    F(etr_collective_info, out_msg_nelems, 24),
    F(etr_collective_info, in_split_sizes, 32),
    F(etr_collective_info, n_in_splits, 40),
    F(etr_collective_info, out_split_sizes, 48),
    F(etr_collective_info, n_out_splits, 56),
    F(etr_collective_info, global_rank_start, 64),
    F(etr_collective_info, global_rank_stride, 72),
    F(etr_collective_info, pg_name, 80),
    F(etr_collective_info, pg_desc, 88),
    F(etr_collective_info, pg_size, 96),
    F(etr_collective_info, is_async, 104),
    F(etr_trace_options, struct_size, 0),
    F(etr_trace_options, schema, 8),
    F(etr_trace_options, no_timing, 12),
    F(etr_trace_options, buffer_kb, 16),
    F(etr_trace_options, max_buffers, 20),
    F(etr_trace_options, sample_probability, 24),
    F(etr_trace_options, scopes, 32),
    F(etr_trace_options, traceback, 40),
    F(etr_trace_options, flush_ms, 48),
    F(etr_trace_options, flush_kb, 52),
    F(etr_trace_options, sync, 56),
    F(etr_trace_options, fatal_signals, 57),
    F(etr_trace_options, stall_ms, 60),
    F(etr_trace_options, ns_timing, 64),
    F(etr_trace_options, ring_mb, 68),
    F(etr_trace_stats, struct_size, 0),
    F(etr_trace_stats, nodes_written, 8),
    F(etr_trace_stats, ops_recorded, 16),
    F(etr_trace_stats, bytes_written, 24),
    F(etr_trace_stats, threads, 32),
    F(etr_trace_stats, objects, 40),
    F(etr_trace_stats, ids_retired, 48),
    F(etr_trace_stats, strings_cut, 56),
    F(etr_trace_stats, lists_cut, 64),
    F(etr_trace_stats, utf8_replaced, 72),
    F(etr_trace_stats, nesting_cut, 80),
    F(etr_trace_stats, ends_without_begin, 88),
    F(etr_trace_stats, ends_out_of_order, 96),
    F(etr_trace_stats, ops_open_at_disable, 104),
    F(etr_trace_stats, ops_open_at_thread_exit, 112),
    F(etr_trace_stats, ops_open_at_close, 120),
    F(etr_trace_stats, nodes_dropped, 128),
    F(etr_trace_stats, buffer_waits, 136),
    F(etr_trace_stats, write_error, 144),
    F(etr_trace_stats, tracebacks, 152),
    F(etr_trace_stats, tracebacks_unique, 160),
    F(etr_trace_stats, frames_unique, 168),
    F(etr_trace_stats, values_fixed, 176),
    F(etr_trace_stats, ends_cross_thread, 184),
    F(etr_trace_stats, ops_abandoned, 192),
    F(etr_trace_stats, ring_dropped, 200),
    F(etr_trace_stats, tracebacks_cut, 208),
    F(etr_traceback_options, struct_size, 0),
    F(etr_traceback_options, enabled, 8),
    F(etr_traceback_options, pattern, 16),
    F(etr_traceback_options, every, 24),
    F(etr_traceback_options, max_depth, 28),
    F(etr_traceback_options, symbolize, 32),
    F(etr_script_frame, name, 0),
    F(etr_script_frame, filename, 8),
    F(etr_script_frame, line, 16),
    F(etr_script_unwinder, struct_size, 0),
    F(etr_script_unwinder, entry_symbols, 8),
    F(etr_script_unwinder, n_entry_symbols, 16),
    F(etr_script_unwinder, gather, 24),
    F(etr_script_unwinder, symbolize, 32),
    F(etr_script_unwinder, release, 40),
    F(etr_script_unwinder, release_in_record, 48),
    F(etr_script_unwinder, user, 56),
    F(etr_traceback_stats, struct_size, 0),
    F(etr_traceback_stats, captures, 8),
    F(etr_traceback_stats, captures_truncated, 16),
    F(etr_traceback_stats, capture_failures, 24),
    F(etr_traceback_stats, frames_captured, 32),
    F(etr_traceback_stats, unwind_cache_hits, 40),
    F(etr_traceback_stats, unwind_cache_misses, 48),
    F(etr_traceback_stats, unwind_cache_resets, 56),
    F(etr_traceback_stats, unwind_fallbacks, 64),
    F(etr_traceback_stats, frame_cache_hits, 72),
    F(etr_traceback_stats, frame_cache_partial_hits, 80),
    F(etr_traceback_stats, frame_cache_misses, 88),
    F(etr_traceback_stats, frames_reused, 96),
    F(etr_traceback_stats, frames_walked, 104),
    F(etr_traceback_stats, symbol_cache_hits, 112),
    F(etr_traceback_stats, symbol_cache_misses, 120),
    F(etr_traceback_stats, symbolize_fallbacks, 128),
    F(etr_traceback_stats, script_frames, 136),
    F(etr_traceback_stats, script_symbolized, 144),
    F(etr_traceback_stats, script_released, 152),
    F(etr_tensor, impl, 0),
    F(etr_tensor, storage, 8),
    F(etr_tensor, storage_offset, 16),
    F(etr_tensor, numel, 24),
    F(etr_tensor, itemsize, 32),
    F(etr_tensor, dtype, 40),
    F(etr_tensor, device, 48),
    F(etr_tensor, ndim, 56),
    F(etr_tensor, sizes, 64),
    F(etr_tensor, strides, 72),
};
#define S(type, size) \
  { #type, sizeof(type), size }
static const struct {
  const char *type;
  size_t got, want;
} sizes[] = {
    S(etr_value, 16),
    S(etr_record, 120),
    S(etr_process_group, 56),
    S(etr_observer_options, 56),
    S(etr_registry_stats, 48),
    S(etr_kernel_info, 40),
    S(etr_collective_info, 112),
    S(etr_trace_options, 72),
    S(etr_trace_stats, 216),
    S(etr_traceback_options, 40),
    S(etr_script_frame, 24),
    S(etr_script_unwinder, 64),
    S(etr_traceback_stats, 160),
    S(etr_tensor, 80),
};

int main(void) {
  int bad = 0;
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (fields[i].got != fields[i].want) {
      printf("%s.%s at offset %zu, frozen at %zu\n", fields[i].type, fields[i].field, fields[i].got,
             fields[i].want);
      bad = 1;
    }
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    if (sizes[i].got != sizes[i].want) {
      printf("sizeof(%s) is %zu, frozen at %zu%s\n", sizes[i].type, sizes[i].got, sizes[i].want,
             sizes[i].got > sizes[i].want ? " (grown: at its end? then update this table)" : "");
      bad = 1;
    }
  if (!bad)
    printf("%zu fields and %zu struct sizes as frozen\n", sizeof fields / sizeof fields[0],
           sizeof sizes / sizeof sizes[0]);
  return bad;
}
#else
int main(void) {
  puts("SKIP: the frozen layout is x86-64's");
  return 77;
}
#endif
