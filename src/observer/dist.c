/* Ranks and process groups (etr/dist.h): a table of declared groups, and the
 * `## process_group:init ##` node recorded through the public record API, so it reaches
 * every observer like any other op (docs/FORMAT.md, "Ranks and process groups"). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "etr/dist.h"
#include "etr/record.h"
#include "observer/internal.h"
#include "observer/registry.h"

/* The recorder cuts String values here (docs/FORMAT.md); a longer list would not parse. */
#define STRING_CUT 8192

typedef struct group {
  char *name, *desc, *backend;
  int64_t *ranks;
  uint32_t n_ranks;
  int64_t size;
} group;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_env_read;
static int64_t g_rank, g_world = 1;
static group *g_groups;
static size_t g_n, g_cap;

/* The first of the variables that holds a number in [lo, hi], else dflt. */
static int64_t env_number(const char *const *names, int64_t lo, int64_t hi, int64_t dflt) {
  for (; *names; names++) {
    const char *v = getenv(*names);
    if (!v || !*v) continue;
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*end || n < lo || n > hi) {
      etr__log(ETR_LOG_WARN, "%s=%s ignored (not a number in %" PRId64 "..%" PRId64 ")", *names, v,
               lo, hi);
      continue;
    }
    return (int64_t)n;
  }
  return dflt;
}

static void env_defaults_locked(void) {
  if (g_env_read) return;
  g_env_read = true;
  static const char *const rank_vars[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                          "SLURM_PROCID", NULL};
  static const char *const size_vars[] = {"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                          "SLURM_NTASKS", NULL};
  g_world = env_number(size_vars, 1, INT32_MAX, 1);
  g_rank = env_number(rank_vars, 0, INT32_MAX, 0);
  if (g_rank >= g_world) {
    etr__log(ETR_LOG_WARN, "rank %" PRId64 " >= world size %" PRId64 "; world size set to %" PRId64,
             g_rank, g_world, g_rank + 1);
    g_world = g_rank + 1;
  }
}

int64_t etr_dist_rank(void) {
  pthread_mutex_lock(&g_lock);
  env_defaults_locked();
  int64_t r = g_rank;
  pthread_mutex_unlock(&g_lock);
  return r;
}

int64_t etr_dist_world_size(void) {
  pthread_mutex_lock(&g_lock);
  env_defaults_locked();
  int64_t w = g_world;
  pthread_mutex_unlock(&g_lock);
  return w;
}

int etr_dist_set_rank(int64_t rank, int64_t world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) return ETR_EINVAL;
  etr__thread *q = etr__quiet_self(); /* (the lock: registry.h, ETR__QUIET_CALL) */
  pthread_mutex_lock(&g_lock);
  g_env_read = true;
  g_rank = rank;
  g_world = world_size;
  pthread_mutex_unlock(&g_lock);
  etr__quiet_scope_end(&q);
  return etr_dist_record_groups(); /* (not quiet: it records the groups' node) */
}

static void group_free(group *g) {
  free(g->name);
  free(g->desc);
  free(g->backend);
  free(g->ranks);
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

/* etr_process_group as it was first released, up to its last field then (any later field
 * goes after it). */
#define PROCESS_GROUP_FIRST_SIZE (offsetof(etr_process_group, size) + sizeof(int64_t))
_Static_assert(sizeof(etr_process_group) >= PROCESS_GROUP_FIRST_SIZE, "structs grow only");

/* etr_dist_declare_group but the node: quiet, as it allocates and locks. */
static int declare_group(const etr_process_group *in) {
  ETR__QUIET_CALL();
  etr_process_group pgo = ETR_PROCESS_GROUP_INIT;
  if (!in || !etr__options_in(&pgo, sizeof pgo, in, PROCESS_GROUP_FIRST_SIZE)) return ETR_EINVAL;
  const etr_process_group *pg = &pgo;
  if (!pg->name || !*pg->name) return ETR_EINVAL;
  if (pg->n_ranks > 0 && !pg->ranks) return ETR_EINVAL;
  for (uint32_t i = 0; i < pg->n_ranks; i++)
    if (pg->ranks[i] < 0) return ETR_EINVAL;
  group g = {dup_or_empty(pg->name),
             dup_or_empty(pg->desc),
             dup_or_empty(pg->backend),
             NULL,
             pg->n_ranks,
             pg->size};
  if (pg->n_ranks) g.ranks = malloc(pg->n_ranks * sizeof *g.ranks);
  if (!g.name || !g.desc || !g.backend || (pg->n_ranks && !g.ranks)) {
    group_free(&g);
    return ETR_ENOMEM;
  }
  if (pg->n_ranks) memcpy(g.ranks, pg->ranks, pg->n_ranks * sizeof *g.ranks);
  pthread_mutex_lock(&g_lock);
  size_t i = 0;
  while (i < g_n && strcmp(g_groups[i].name, g.name) != 0) i++;
  int rc = 0;
  if (i < g_n) {
    group_free(&g_groups[i]);
    g_groups[i] = g;
  } else if (g_n >= ETR_DIST_MAX_GROUPS) {
    rc = ETR_ENOSPC;
  } else {
    if (g_n == g_cap) {
      size_t cap = g_cap ? g_cap * 2 : 8;
      group *ng = realloc(g_groups, cap * sizeof *ng);
      if (!ng) rc = ETR_ENOMEM;
      if (ng) {
        g_groups = ng;
        g_cap = cap;
      }
    }
    if (rc == 0) g_groups[g_n++] = g;
  }
  pthread_mutex_unlock(&g_lock);
  if (rc != 0) group_free(&g);
  return rc;
}

int etr_dist_declare_group(const etr_process_group *in) {
  int rc = declare_group(in);
  return rc != 0 ? rc : etr_dist_record_groups(); /* (not quiet: it records the node) */
}

/* g's member count and this process's rank in it (-1: not a member). */
static void group_place_locked(const group *g, int64_t *size, int64_t *at) {
  *size = g->size > 0 ? g->size : g->n_ranks ? (int64_t)g->n_ranks : g_world;
  *at = g->n_ranks ? -1 : g_rank;
  for (uint32_t i = 0; i < g->n_ranks && *at < 0; i++)
    if (g->ranks[i] == g_rank) *at = i;
}

uint32_t etr_dist_group_of(int64_t size, int64_t group_rank, char *name, size_t cap) {
  if (name && cap) name[0] = '\0';
  pthread_mutex_lock(&g_lock);
  env_defaults_locked();
  uint32_t n = 0;
  const char *found = NULL;
  bool has_default = false;
  for (size_t i = 0; i < g_n; i++) {
    int64_t gs, at;
    group_place_locked(&g_groups[i], &gs, &at);
    if (!strcmp(g_groups[i].name, "0")) has_default = true;
    if (gs == size && at == group_rank && at >= 0) {
      n++;
      found = g_groups[i].name;
    }
  }
  if (!has_default && size == g_world && group_rank == g_rank) {
    n++;
    found = "0";
  }
  if (n == 1 && name && cap) {
    size_t len = strlen(found);
    if (len >= cap) len = cap - 1;
    memcpy(name, found, len);
    name[len] = '\0';
  }
  pthread_mutex_unlock(&g_lock);
  return n;
}

void etr_dist_reset(void) {
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_n; i++) group_free(&g_groups[i]);
  free(g_groups);
  g_groups = NULL;
  g_n = g_cap = 0;
  g_env_read = false;
  g_rank = 0;
  g_world = 1;
  pthread_mutex_unlock(&g_lock);
}

/* A growing text that counts what did not fit (snprintf-style). */
typedef struct text {
  char *buf;
  size_t cap, len;
} text;

static void put(text *t, const char *s, size_t n) {
  if (t->len < t->cap) {
    size_t room = t->cap - t->len;
    memcpy(t->buf + t->len, s, n < room ? n : room);
  }
  t->len += n;
}

static void put_cstr(text *t, const char *s) { put(t, s, strlen(s)); }

static void put_i64(text *t, int64_t v) {
  char tmp[24];
  int n = snprintf(tmp, sizeof tmp, "%" PRId64, v);
  put(t, tmp, (size_t)n);
}

/* A JSON string: quotes, backslashes and control bytes escaped; other bytes as they are (the
 * recorder makes the whole input valid UTF-8 when it writes it). */
static void put_jstr(text *t, const char *s) {
  put(t, "\"", 1);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\') {
      char e[2] = {'\\', (char)*p};
      put(t, e, 2);
    } else if (*p < 0x20) {
      char e[8];
      snprintf(e, sizeof e, "\\u%04x", *p);
      put(t, e, 6);
    } else {
      put(t, (const char *)p, 1);
    }
  }
  put(t, "\"", 1);
}

static void put_group(text *t, const group *g, size_t count) {
  put_cstr(t, "{\"pg_name\": ");
  put_jstr(t, g->name);
  put_cstr(t, ", \"pg_desc\": ");
  put_jstr(t, g->desc);
  put_cstr(t, ", \"backend_config\": ");
  put_jstr(t, g->backend);
  put_cstr(t, ", \"ranks\": [");
  int64_t my = g->n_ranks ? -1 : g_rank;
  for (uint32_t i = 0; i < g->n_ranks; i++) {
    if (i) put_cstr(t, ", ");
    put_i64(t, g->ranks[i]);
    if (g->ranks[i] == g_rank && my < 0) my = i;
  }
  put_cstr(t, "], \"group_size\": ");
  put_i64(t, g->size > 0 ? g->size : g->n_ranks ? (int64_t)g->n_ranks : g_world);
  put_cstr(t, ", \"group_count\": ");
  put_i64(t, (int64_t)count);
  put_cstr(t, ", \"rank\": ");
  put_i64(t, my);
  put_cstr(t, "}");
}

static size_t groups_json_locked(char *buf, size_t cap) {
  env_defaults_locked();
  text t = {buf, cap, 0};
  bool has_default = false;
  for (size_t i = 0; i < g_n; i++)
    if (!strcmp(g_groups[i].name, "0")) has_default = true;
  size_t count = g_n + (has_default ? 0 : 1);
  put_cstr(&t, "[");
  if (!has_default) {
    group world = {"0", "default_pg", "", NULL, 0, 0};
    put_group(&t, &world, count);
  }
  for (size_t i = 0; i < g_n; i++) {
    if (i || !has_default) put_cstr(&t, ", ");
    put_group(&t, &g_groups[i], count);
  }
  put_cstr(&t, "]");
  if (cap) buf[t.len < cap ? t.len : cap - 1] = '\0';
  return t.len;
}

size_t etr_dist_groups_json(char *buf, size_t cap) {
  if (!buf) cap = 0; /* (NULL asks for the length only, whatever cap says) */
  pthread_mutex_lock(&g_lock);
  size_t n = groups_json_locked(buf, cap);
  pthread_mutex_unlock(&g_lock);
  return n;
}

const char etr__pg_init_name[] = ETR__PG_INIT_NAME;

int etr_dist_record_groups(void) {
  etr_record rec;
  etr_record_init(&rec, etr__pg_init_name, ETR_SCOPE_USER_SCOPE);
  if (!etr_record_is_active(&rec)) return 0; /* nobody observes: nothing to build */
  /* Measured and written under one lock hold: a group declared meanwhile by another thread
   * cannot make the text outgrow its buffer (a cut list would not parse). */
  etr__thread *q = etr__quiet_self(); /* (the lock and malloc: registry.h, ETR__QUIET_CALL) */
  pthread_mutex_lock(&g_lock);
  size_t n = groups_json_locked(NULL, 0);
  char *json = malloc(n + 1);
  if (json) groups_json_locked(json, n + 1);
  pthread_mutex_unlock(&g_lock);
  etr__quiet_scope_end(&q);
  if (!json) return ETR_ENOMEM; /* rec was never begun: nothing to end */
  if (n > STRING_CUT)
    etr__log(ETR_LOG_WARN, "the process-group list (%zu bytes) is cut at %d bytes in the trace", n,
             STRING_CUT);
  etr_value in = etr_value_string(json);
  if (etr_record_needs_inputs(&rec)) {
    rec.inputs = &in;
    rec.n_inputs = 1;
  }
  rec.schema = "";
  etr_record_begin(&rec);
  etr_record_end(&rec);
  free(json);
  return 0;
}
