/* tests/trace/trace_util.c — see trace_util.h. */
#define _GNU_SOURCE
#include "trace_util.h"

#include <dirent.h>
#include <signal.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef ETR_TRACE_HAVE_ZLIB
#include <zlib.h>
#endif

/* ---- temp dirs and files ---- */

void tu_mkdtemp(char *out, size_t n) {
  const char *base = getenv("TMPDIR");
  if (base == NULL || base[0] == '\0') base = "/tmp";
  int w = snprintf(out, n, "%s/etr-trace-test-XXXXXX", base);
  assert_true(w > 0 && (size_t)w < n);
  assert_non_null(mkdtemp(out));
}

void tu_rmdir(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *e;
  char p[1024];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (unlink(p) != 0) tu_rmdir(p);
  }
  closedir(d);
  rmdir(dir);
}

void tu_write_file(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(p, 1, n, f), n);
  assert_int_equal(fclose(f), 0);
}

char *tu_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (n == cap) {
      cap *= 2;
      buf = realloc(buf, cap + 1);
    }
    size_t r = fread(buf + n, 1, cap - n, f);
    if (r == 0) break;
    n += r;
  }
  fclose(f);
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
}

char *tu_read_gz(const char *path, size_t *len) {
#ifdef ETR_TRACE_HAVE_ZLIB
  gzFile f = gzopen(path, "rb");
  if (f == NULL) return NULL;
  size_t cap = 1 << 20, n = 0;
  char *buf = malloc(cap + 1);
  for (;;) {
    if (n == cap) {
      cap *= 2;
      buf = realloc(buf, cap + 1);
    }
    size_t want = cap - n;
    if (want > (1u << 30)) want = 1u << 30;
    int r = gzread(f, buf + n, (unsigned)want);
    if (r < 0) {
      gzclose(f);
      free(buf);
      return NULL;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  gzclose(f);
  buf[n] = '\0';
  if (len) *len = n;
  return buf;
#else
  (void)path;
  (void)len;
  return NULL;
#endif
}

size_t tu_gz_members(const char *path) {
#ifdef ETR_TRACE_HAVE_ZLIB
  size_t n = 0;
  unsigned char *p = (unsigned char *)tu_read_file(path, &n);
  if (p == NULL) return 0;
  size_t members = 0, off = 0;
  static unsigned char out[1 << 16];
  while (off < n) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 15 + 16) != Z_OK) break; /* gzip only, one member */
    zs.next_in = p + off;
    zs.avail_in = (uInt)(n - off);
    int r;
    do {
      zs.next_out = out;
      zs.avail_out = sizeof out;
      r = inflate(&zs, Z_NO_FLUSH);
    } while (r == Z_OK);
    off = n - zs.avail_in;
    inflateEnd(&zs);
    if (r != Z_STREAM_END) {
      members = 0;
      break;
    }
    members++;
  }
  free(p);
  return members;
#else
  (void)path;
  return 0;
#endif
}

int64_t tu_mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t tu_mono_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void tu_sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

extern char **environ;

int tu_run(const char *exe, const char *const *args, const char *const *extra_env, pid_t *pid_out) {
  size_t n = 0;
  while (environ[n] != NULL) n++;
  size_t ne = 0;
  while (extra_env != NULL && extra_env[ne] != NULL) ne++;
  char **env = calloc(n + ne + 1, sizeof(char *));
  assert_non_null(env);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (strncmp(environ[i], "ETR_TRACE", 9) == 0) continue;
    int overridden = 0;
    for (size_t j = 0; j < ne; j++) {
      const char *eq = strchr(extra_env[j], '=');
      size_t nl = eq ? (size_t)(eq - extra_env[j]) + 1 : strlen(extra_env[j]);
      if (strncmp(environ[i], extra_env[j], nl) == 0) overridden = 1;
    }
    if (!overridden) env[k++] = environ[i];
  }
  for (size_t i = 0; i < ne; i++) env[k++] = (char *)extra_env[i];
  env[k] = NULL;
  char *argv[16];
  size_t a;
  argv[0] = (char *)exe;
  for (a = 0; args != NULL && args[a] != NULL && a < 14; a++) argv[a + 1] = (char *)args[a];
  argv[a + 1] = NULL;
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    execve(exe, argv, env);
    _exit(127);
  }
  free(env);
  if (pid_out != NULL) *pid_out = pid;
  int status = 0;
  if (tu_wait(pid, 60, &status) != 0) fail_msg("%s %s: no exit after 60 s (killed)", exe, argv[1]);
  return status;
}

int tu_etr(const char *tool, const char *const *args) {
  int st = tu_run(tool, args, NULL, NULL);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

void tu_assert_valid(const char *tool, const char *path) {
  const char *args[] = {"validate", "--strict", "--quiet", path, NULL};
  if (tu_etr(tool, args) != 0) fail_msg("etr validate --strict rejects %s", path);
}

int tu_wait(pid_t pid, int timeout_s, int *status) {
  int64_t deadline = tu_mono_ms() + (int64_t)timeout_s * 1000;
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return 0;
    if (r < 0 && errno != EINTR) return -1;
    if (tu_mono_ms() > deadline) {
      kill(pid, SIGKILL);
      while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
      }
      return -1;
    }
    tu_sleep_us(2000);
  }
}

/* ---- trace life cycle ---- */

/* What each live tu_trace holds, copied (the tu_trace itself may sit in the stack frame of a
 * test that failed and jumped away), so that tu_cleanup can release it. */
typedef struct tracked {
  const tu_trace *owner;
  char dir[256];
  etr_trace *trace;
  char *text;
  json_t *root;
} tracked;
static tracked g_tracked[16];

static void track(const tu_trace *t) {
  tracked *slot = NULL;
  for (size_t i = 0; i < TU_ARRAY_LEN(g_tracked); i++)
    if (g_tracked[i].owner == t) slot = &g_tracked[i];
  for (size_t i = 0; slot == NULL && i < TU_ARRAY_LEN(g_tracked); i++)
    if (g_tracked[i].owner == NULL) slot = &g_tracked[i];
  if (slot == NULL) return;
  slot->owner = t;
  memcpy(slot->dir, t->dir, sizeof slot->dir);
  slot->trace = t->trace;
  slot->text = t->text;
  slot->root = t->root;
}

static void untrack(const tu_trace *t) {
  for (size_t i = 0; i < TU_ARRAY_LEN(g_tracked); i++)
    if (g_tracked[i].owner == t) memset(&g_tracked[i], 0, sizeof g_tracked[i]);
}

int tu_cleanup(void **state) {
  (void)state;
  for (size_t i = 0; i < TU_ARRAY_LEN(g_tracked); i++) {
    tracked *k = &g_tracked[i];
    if (k->owner == NULL) continue;
    if (k->trace != NULL) etr_trace_close(k->trace);
    json_decref(k->root);
    free(k->text);
    if (k->dir[0] != '\0') tu_rmdir(k->dir);
    memset(k, 0, sizeof *k);
  }
  return 0;
}

/* A trace opened, not enabled, at file `name` of a new temp dir. */
static void open_at(tu_trace *t, const etr_trace_options *opt, const char *name) {
  memset(t, 0, sizeof *t);
  tu_mkdtemp(t->dir, sizeof t->dir);
  snprintf(t->path, sizeof t->path, "%s/%s", t->dir, name);
  track(t);
  int rc = etr_trace_open(t->path, opt, &t->trace);
  track(t);
  if (rc != 0) fail_msg("etr_trace_open(%s) = %d (%s)", t->path, rc, etr_strerror(rc));
  assert_non_null(t->trace);
}

void tu_open_disabled(tu_trace *t, const etr_trace_options *opt) { open_at(t, opt, "trace.json"); }

void tu_open(tu_trace *t, const etr_trace_options *opt) {
  tu_open_disabled(t, opt);
  assert_int_equal(etr_trace_enable(t->trace), 0);
  assert_true(etr_trace_is_enabled(t->trace));
}

void tu_open_binary(tu_trace *t, const etr_trace_options *opt) {
  open_at(t, opt, "trace.etr");
  assert_int_equal(etr_trace_enable(t->trace), 0);
}

void tu_close(tu_trace *t) {
  t->close_rc = etr_trace_close(t->trace);
  t->trace = NULL;
  track(t);
  tu_load(t);
}

void tu_close_ok(tu_trace *t) {
  t->close_rc = etr_trace_close(t->trace);
  t->trace = NULL;
  track(t);
  if (t->close_rc != 0)
    fail_msg("etr_trace_close = %d (%s)", t->close_rc, etr_strerror(t->close_rc));
  tu_load(t);
}

void tu_close_convert(tu_trace *t, const char *tool) {
  int rc = etr_trace_close(t->trace);
  t->trace = NULL;
  track(t);
  if (rc != 0) fail_msg("etr_trace_close = %d (%s)", rc, etr_strerror(rc));
  char bin[sizeof t->path];
  memcpy(bin, t->path, sizeof bin);
  snprintf(t->path, sizeof t->path, "%s/trace.json", t->dir);
  const char *args[] = {"convert", bin, "-o", t->path, NULL};
  rc = tu_etr(tool, args);
  if (rc != 0) fail_msg("etr convert %s -o %s: exit %d", bin, t->path, rc);
  tu_assert_valid(tool, t->path);
  tu_load(t);
}

void tu_load(tu_trace *t) {
  if (t->text == NULL) t->text = tu_read_file(t->path, &t->len);
  if (t->text == NULL) fail_msg("cannot read %s", t->path);
  track(t);
  json_error_t err;
  t->root = json_loadb(t->text, t->len, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &err);
  track(t);
  if (t->root == NULL) {
    size_t pos = (size_t)err.position;
    size_t from = pos > 120 ? pos - 120 : 0;
    fail_msg("%s does not parse: %s (line %d col %d pos %zu); near: %.240s", t->path, err.text,
             err.line, err.column, pos, t->text + from);
  }
  assert_true(json_is_object(t->root));
  t->nodes = json_object_get(t->root, "nodes");
  if (!json_is_array(t->nodes)) fail_msg("%s: no \"nodes\" array", t->path);
  tu_check_tree(t);
}

void tu_traceback_options(etr_trace_options *opt, etr_traceback_options *tb) {
  *opt = (etr_trace_options)ETR_TRACE_OPTIONS_INIT;
  *tb = (etr_traceback_options)ETR_TRACEBACK_OPTIONS_INIT;
  tb->enabled = true;
  opt->traceback = tb;
}

void tu_open_traceback(tu_trace *t, const etr_traceback_options *tb) {
  etr_trace_options opt;
  etr_traceback_options on;
  tu_traceback_options(&opt, &on);
  if (tb != NULL) on = *tb;
  on.enabled = true;
  tu_open(t, &opt);
}

void tu_load_path(tu_trace *t, const char *path) {
  memset(t, 0, sizeof *t);
  snprintf(t->path, sizeof t->path, "%s", path);
  tu_load(t);
}

bool tu_nothing_past_end(const char *path) {
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  uint64_t used = ((uint64_t)st.st_size + 4095) & ~(uint64_t)4095;
  return (uint64_t)st.st_blocks * 512u <= used + 8192;
}

void tu_convert_load(tu_trace *t, const char *tool, const char *bin, const char *json) {
  const char *args[] = {"convert", bin, "-o", json, NULL};
  int rc = tu_etr(tool, args);
  if (rc != 0) fail_msg("etr convert %s -o %s: exit %d", bin, json, rc);
  tu_assert_valid(tool, json);
  tu_load_path(t, json);
}

void tu_free(tu_trace *t) {
  untrack(t);
  if (t->trace != NULL) etr_trace_close(t->trace);
  t->trace = NULL;
  json_decref(t->root);
  t->root = NULL;
  t->nodes = NULL;
  free(t->text);
  t->text = NULL;
  if (t->dir[0] != '\0') tu_rmdir(t->dir);
  t->dir[0] = '\0';
}

/* ---- recording ---- */

void tu_begin(etr_record *r, const char *name, const etr_value *in, uint32_t n_in) {
  etr_record_init(r, name, ETR_SCOPE_FUNCTION);
  if (etr_record_needs_inputs(r)) {
    r->inputs = in;
    r->n_inputs = n_in;
  }
  etr_record_begin(r);
}

void tu_end(etr_record *r, const etr_value *out, uint32_t n_out) {
  if (etr_record_needs_outputs(r)) {
    r->outputs = out;
    r->n_outputs = n_out;
  }
  etr_record_end(r);
}

void tu_op(const char *name, const etr_value *in, uint32_t n_in, const etr_value *out,
           uint32_t n_out) {
  etr_record r;
  tu_begin(&r, name, in, n_in);
  tu_end(&r, out, n_out);
}

/* ---- lookups ---- */

size_t tu_node_count(const tu_trace *t) { return json_array_size(t->nodes); }

const char *tu_name(const json_t *node) { return json_string_value(json_object_get(node, "name")); }

size_t tu_count(const tu_trace *t, const char *name) {
  size_t i, n = 0;
  json_t *node;
  json_array_foreach(t->nodes, i, node) {
    const char *s = tu_name(node);
    if (s != NULL && strcmp(s, name) == 0) n++;
  }
  return n;
}

json_t *tu_find(const tu_trace *t, const char *name) {
  size_t i;
  json_t *node;
  json_array_foreach(t->nodes, i, node) {
    const char *s = tu_name(node);
    if (s != NULL && strcmp(s, name) == 0) return node;
  }
  return NULL;
}

json_t *tu_node(const tu_trace *t, const char *name) {
  size_t n = tu_count(t, name);
  if (n != 1) fail_msg("expected exactly one node named \"%s\", found %zu", name, n);
  return tu_find(t, name);
}

json_t *tu_node_by_id(const tu_trace *t, json_int_t id) {
  size_t i;
  json_t *node;
  json_array_foreach(t->nodes, i, node) {
    if (json_integer_value(json_object_get(node, "id")) == id) return node;
  }
  return NULL;
}

size_t tu_node_index(const tu_trace *t, const json_t *node) {
  size_t i;
  json_t *n;
  json_array_foreach(t->nodes, i, n) {
    if (n == node) return i;
  }
  fail_msg("node not in the trace");
  return 0;
}

json_int_t tu_id(const json_t *node) {
  json_t *v = json_object_get(node, "id");
  assert_true(json_is_integer(v));
  return json_integer_value(v);
}

json_int_t tu_ctrl_deps(const json_t *node) {
  json_t *v = json_object_get(node, "ctrl_deps");
  assert_true(json_is_integer(v));
  return json_integer_value(v);
}

json_t *tu_attr(const json_t *node, const char *name) {
  size_t i;
  json_t *a;
  json_array_foreach(json_object_get(node, "attrs"), i, a) {
    const char *s = json_string_value(json_object_get(a, "name"));
    if (s != NULL && strcmp(s, name) == 0) return a;
  }
  return NULL;
}

json_int_t tu_attr_int(const json_t *node, const char *name) {
  json_t *a = tu_attr(node, name);
  if (a == NULL) fail_msg("node \"%s\": no attr %s", tu_name(node), name);
  json_t *v = json_object_get(a, "value");
  if (!json_is_integer(v)) fail_msg("node \"%s\": attr %s is not an integer", tu_name(node), name);
  return json_integer_value(v);
}

const char *tu_attr_str(const json_t *node, const char *name) {
  json_t *a = tu_attr(node, name);
  if (a == NULL) fail_msg("node \"%s\": no attr %s", tu_name(node), name);
  json_t *v = json_object_get(a, "value");
  if (!json_is_string(v)) fail_msg("node \"%s\": attr %s is not a string", tu_name(node), name);
  return json_string_value(v);
}

json_t *tu_in(const json_t *node, const char *io, const char *field, size_t i) {
  return json_array_get(json_object_get(json_object_get(node, io), field), i);
}

json_t *tu_thread_node(const tu_trace *t, json_int_t tid) {
  size_t i;
  json_t *node;
  json_array_foreach(t->nodes, i, node) {
    const char *s = tu_name(node);
    if (s == NULL || strcmp(s, TU_THREAD_NAME) != 0) continue;
    json_t *a = tu_attr(node, "tid");
    if (a != NULL && json_integer_value(json_object_get(a, "value")) == tid) return node;
  }
  return NULL;
}

json_t *tu_stats(const tu_trace *t) {
  json_t *etr = json_object_get(t->root, "etr");
  if (!json_is_object(etr)) fail_msg("no \"etr\" footer object");
  json_t *s = json_object_get(etr, "stats");
  if (!json_is_object(s)) fail_msg("no \"etr\".\"stats\" object");
  return s;
}

json_int_t tu_stat(const tu_trace *t, const char *name) {
  json_t *v = json_object_get(tu_stats(t), name);
  if (!json_is_integer(v)) fail_msg("etr.stats.%s missing or not an integer", name);
  return json_integer_value(v);
}

/* ---- raw key order ---- */

size_t tu_raw_ws(const char *text, size_t len, size_t off) {
  while (off < len &&
         (text[off] == ' ' || text[off] == '\n' || text[off] == '\r' || text[off] == '\t'))
    off++;
  return off;
}

static size_t raw_string_end(const char *text, size_t len, size_t off) {
  assert_true(off < len && text[off] == '"');
  off++;
  while (off < len && text[off] != '"') {
    if (text[off] == '\\') off++;
    off++;
  }
  assert_true(off < len);
  return off + 1;
}

size_t tu_raw_skip(const char *text, size_t len, size_t off) {
  off = tu_raw_ws(text, len, off);
  assert_true(off < len);
  char c = text[off];
  if (c == '"') return raw_string_end(text, len, off);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    off = tu_raw_ws(text, len, off + 1);
    if (off < len && text[off] == close) return off + 1;
    for (;;) {
      if (c == '{') {
        off = raw_string_end(text, len, tu_raw_ws(text, len, off));
        off = tu_raw_ws(text, len, off);
        assert_true(off < len && text[off] == ':');
        off++;
      }
      off = tu_raw_skip(text, len, off);
      off = tu_raw_ws(text, len, off);
      assert_true(off < len);
      if (text[off] == ',') {
        off++;
        continue;
      }
      assert_true(text[off] == close);
      return off + 1;
    }
  }
  /* number, true, false, null */
  while (off < len && text[off] != ',' && text[off] != ']' && text[off] != '}' &&
         text[off] != ' ' && text[off] != '\n' && text[off] != '\r' && text[off] != '\t')
    off++;
  return off;
}

void tu_raw_keys(const char *text, size_t len, size_t off, tu_keys *out) {
  memset(out, 0, sizeof *out);
  off = tu_raw_ws(text, len, off);
  assert_true(off < len && text[off] == '{');
  off = tu_raw_ws(text, len, off + 1);
  if (text[off] == '}') return;
  for (;;) {
    off = tu_raw_ws(text, len, off);
    size_t end = raw_string_end(text, len, off);
    if (out->n < TU_MAX_KEYS) {
      size_t kl = end - off - 2;
      if (kl >= sizeof out->name[0]) kl = sizeof out->name[0] - 1;
      memcpy(out->name[out->n], text + off + 1, kl);
      out->name[out->n][kl] = '\0';
    }
    off = tu_raw_ws(text, len, end);
    assert_true(text[off] == ':');
    off = tu_raw_ws(text, len, off + 1);
    if (out->n < TU_MAX_KEYS) out->val_off[out->n] = off;
    out->n++;
    off = tu_raw_ws(text, len, tu_raw_skip(text, len, off));
    if (text[off] == ',') {
      off++;
      continue;
    }
    assert_true(text[off] == '}');
    return;
  }
}

size_t tu_raw_elems(const char *text, size_t len, size_t off, size_t *offs, size_t max) {
  size_t n = 0;
  off = tu_raw_ws(text, len, off);
  assert_true(off < len && text[off] == '[');
  off = tu_raw_ws(text, len, off + 1);
  if (text[off] == ']') return 0;
  for (;;) {
    off = tu_raw_ws(text, len, off);
    if (n < max) offs[n] = off;
    n++;
    off = tu_raw_ws(text, len, tu_raw_skip(text, len, off));
    if (text[off] == ',') {
      off++;
      continue;
    }
    assert_true(text[off] == ']');
    return n;
  }
}

void tu_json_keys(const json_t *obj, tu_keys *out) {
  memset(out, 0, sizeof *out);
  for (void *it = json_object_iter((json_t *)obj); it != NULL;
       it = json_object_iter_next((json_t *)obj, it)) {
    if (out->n < TU_MAX_KEYS)
      snprintf(out->name[out->n], sizeof out->name[0], "%s", json_object_iter_key(it));
    out->n++;
  }
}

const char *tu_keys_join(const tu_keys *k, char *buf, size_t n) {
  size_t w = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < k->n && i < TU_MAX_KEYS; i++) {
    int r = snprintf(buf + w, n - w, "%s%s", i ? "," : "", k->name[i]);
    if (r < 0 || (size_t)r >= n - w) break;
    w += (size_t)r;
  }
  return buf;
}

void tu_root_keys(const tu_trace *t, tu_keys *out) { tu_raw_keys(t->text, t->len, 0, out); }

void tu_node_keys(const tu_trace *t, size_t i, tu_keys *out) {
  tu_keys root;
  tu_root_keys(t, &root);
  size_t k;
  for (k = 0; k < root.n; k++)
    if (strcmp(root.name[k], "nodes") == 0) break;
  assert_true(k < root.n);
  size_t n = i + 1;
  size_t *offs = malloc(sizeof(size_t) * n);
  size_t total = tu_raw_elems(t->text, t->len, root.val_off[k], offs, n);
  assert_true(i < total);
  tu_raw_keys(t->text, t->len, offs[i], out);
  free(offs);
}

/* ---- invariants ---- */

static void check_io(const json_t *node, const char *io) {
  json_t *o = json_object_get(node, io);
  if (!json_is_object(o)) fail_msg("node %s: \"%s\" is not an object", tu_name(node), io);
  json_t *v = json_object_get(o, "values"), *s = json_object_get(o, "shapes"),
         *ty = json_object_get(o, "types"), *st = json_object_get(o, "strides");
  if (!json_is_array(v) || !json_is_array(s) || !json_is_array(ty))
    fail_msg("node %s: %s lacks values/shapes/types arrays", tu_name(node), io);
  if (json_array_size(v) != json_array_size(s) || json_array_size(v) != json_array_size(ty))
    fail_msg("node %s: %s values/shapes/types lengths %zu/%zu/%zu differ", tu_name(node), io,
             json_array_size(v), json_array_size(s), json_array_size(ty));
  if (st != NULL) {
    if (!json_is_array(st) || json_array_size(st) != json_array_size(v))
      fail_msg("node %s: %s strides length %zu != values %zu", tu_name(node), io,
               json_array_size(st), json_array_size(v));
  }
  size_t i;
  json_t *x;
  json_array_foreach(ty, i, x) {
    if (!json_is_string(x)) fail_msg("node %s: %s type %zu not a string", tu_name(node), io, i);
  }
}

void tu_check_tree(const tu_trace *t) {
  size_t n = json_array_size(t->nodes);
  if (n == 0) fail_msg("%s: no nodes (not even the process node)", t->path);
  json_int_t *ids = malloc(sizeof(json_int_t) * n);
  size_t i;
  json_t *node;
  json_array_foreach(t->nodes, i, node) {
    if (!json_is_object(node)) fail_msg("node %zu is not an object", i);
    json_t *id = json_object_get(node, "id");
    if (!json_is_integer(id) || json_integer_value(id) <= 0)
      fail_msg("node %zu: id missing or not a positive integer", i);
    ids[i] = json_integer_value(id);
    if (!json_is_string(json_object_get(node, "name")))
      fail_msg("node %zu: name missing or not a string", i);
    if (!json_is_integer(json_object_get(node, "ctrl_deps")))
      fail_msg("node %zu (%s): ctrl_deps missing or not an integer", i, tu_name(node));
    if (!json_is_array(json_object_get(node, "attrs")))
      fail_msg("node %zu (%s): attrs missing or not an array", i, tu_name(node));
    check_io(node, "inputs");
    check_io(node, "outputs");
    for (size_t j = 0; j < i; j++)
      if (ids[j] == ids[i]) fail_msg("node id %lld used twice", (long long)ids[i]);
  }
  json_array_foreach(t->nodes, i, node) {
    json_int_t p = json_integer_value(json_object_get(node, "ctrl_deps"));
    size_t j;
    for (j = 0; j < n; j++)
      if (ids[j] == p) break;
    if (j == n)
      fail_msg("node %lld (%s): ctrl_deps %lld names no node of the file", (long long)ids[i],
               tu_name(node), (long long)p);
    if (ids[i] != 1 && p == ids[i])
      fail_msg("node %lld (%s) is its own parent", (long long)ids[i], tu_name(node));
  }
  json_t *last = json_array_get(t->nodes, n - 1);
  if (ids[n - 1] != 1 || strcmp(tu_name(last), TU_PROCESS_NAME) != 0)
    fail_msg("the last node is not the process node with id 1 (id %lld, name %s)",
             (long long)ids[n - 1], tu_name(last));
  for (i = 0; i + 1 < n; i++)
    if (ids[i] == 1) fail_msg("id 1 used by node %zu, not the process node", i);
  free(ids);
}

static int looks_like_tensor(const json_t *v, const json_t *shape) {
  if (!json_is_array(v) || json_array_size(v) != 6) return 0;
  for (size_t i = 0; i < 5; i++)
    if (!json_is_integer(json_array_get(v, i))) return 0;
  if (!json_is_string(json_array_get(v, 5))) return 0;
  if (!json_is_array(shape)) return 0;
  size_t i;
  json_t *d;
  json_array_foreach(shape, i, d) {
    if (!json_is_integer(d)) return 0;
  }
  return 1;
}

static size_t collect_value(const json_t *v, const json_t *shape, json_int_t *ids, size_t n,
                            size_t max) {
  if (looks_like_tensor(v, shape)) {
    for (size_t k = 0; k < 2; k++) {
      json_int_t id = json_integer_value(json_array_get(v, k));
      if (id != 0 && n < max) ids[n++] = id;
    }
    return n;
  }
  if (json_is_array(v) && json_is_array(shape)) {
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) { n = collect_value(x, json_array_get(shape, i), ids, n, max); }
  }
  return n;
}

size_t tu_collect_object_ids(const tu_trace *t, json_int_t *ids, size_t max) {
  size_t n = 0, i;
  json_t *node;
  static const char *const io[] = {"inputs", "outputs"};
  json_array_foreach(t->nodes, i, node) {
    for (size_t k = 0; k < 2; k++) {
      json_t *o = json_object_get(node, io[k]);
      json_t *vals = json_object_get(o, "values"), *shapes = json_object_get(o, "shapes");
      size_t j;
      json_t *v;
      json_array_foreach(vals, j, v) {
        n = collect_value(v, json_array_get(shapes, j), ids, n, max);
      }
    }
  }
  return n;
}

/* ---- strings ---- */

int tu_replaced_as(const char *s, size_t len, const char *prefix, const char *suffix, size_t kmin,
                   size_t kmax) {
  size_t pl = strlen(prefix), sl = strlen(suffix);
  if (len < pl + sl) return 0;
  if (memcmp(s, prefix, pl) != 0) return 0;
  if (memcmp(s + len - sl, suffix, sl) != 0) return 0;
  size_t mid = len - pl - sl;
  if (mid % 3 != 0) return 0;
  size_t k = mid / 3;
  if (k < kmin || k > kmax) return 0;
  for (size_t i = 0; i < k; i++)
    if (memcmp(s + pl + 3 * i, "\xEF\xBF\xBD", 3) != 0) return 0;
  return 1;
}

/* Number of entries in dir other than . and .., or -1. */
int tu_dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}
