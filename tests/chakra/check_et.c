/* tests/chakra/check_et.c — reads Chakra .et files with our own decoder (protobuf-c, from
 * tools/chakra/et_def.proto) and checks what Chakra's feeder and ASTRA-sim need of them
 * (docs/FORMAT.md, "Chakra output"):
 *   - a GlobalMetadata message, then Node messages, each after its varint length;
 *   - every ctrl and data dependency names a node of the same file, no id twice, and nothing
 *     depends on a METADATA node;
 *   - every node has a bool attr is_cpu_op, false on COMM nodes;
 *   - COMM_COLL nodes have integer comm_type (a CollectiveCommType) and comm_size, and a
 *     string pg_name;
 *   - a METADATA node's inputs.values is ['<json list>'] naming pg_name and ranks.
 * Options set what the file must also hold:
 *   --min-coll N      at least N COMM_COLL nodes, each with comm_size > 0
 *   --min-timed N     at least N COMP nodes with duration_micros > 0
 *   --min-2deps N     at least N nodes with two or more data deps
 *   --metadata        at least one METADATA node
 *   --same-colls      every file has the same collectives in the same order (type, size, group)
 *   --dump            also print every node, one line each: "node ID TYPE NAME" then
 *                     "comm_type=N comm_size=N pg=NAME" on COMM_COLL nodes, "dur=N tid=N",
 *                     "ctrl=ID,ID data=ID,ID" (its dependencies, comma-separated)
 * Prints one line per file; exit 0 when every check passes, 1 otherwise.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chakra/et_def.pb-c.h"

static int failures;
static bool dump;

static void fail(const char *path, const char *fmt, const char *a, unsigned long long n) {
  printf("FAIL %s: ", path);
  printf(fmt, a, n);
  printf("\n");
  failures++;
}

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  uint8_t *b = malloc(cap);
  size_t r;
  while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      uint8_t *nb = realloc(b, cap *= 2);
      if (!nb) {
        free(b);
        b = NULL;
      }
      b = nb;
    }
  }
  fclose(f);
  *len = n;
  return b;
}

/* The next length-delimited message: its bytes in [*at, *at + *mlen). */
static bool next_msg(const uint8_t *b, size_t len, size_t *pos, size_t *at, size_t *mlen) {
  uint64_t v = 0;
  int shift = 0;
  size_t p = *pos;
  while (p < len && shift < 64) {
    v |= (uint64_t)(b[p] & 0x7f) << shift;
    shift += 7;
    if (!(b[p++] & 0x80)) break;
  }
  if (p > len || v > len - p) return false;
  *at = p;
  *mlen = (size_t)v;
  *pos = p + (size_t)v;
  return true;
}

static const ChakraProtoMsg__AttributeProto *attr(const ChakraProtoMsg__Node *n, const char *name) {
  for (size_t i = 0; i < n->n_attr; i++)
    if (strcmp(n->attr[i]->name, name) == 0) return n->attr[i];
  return NULL;
}

static bool int_attr(const ChakraProtoMsg__AttributeProto *a, int64_t *v) {
  if (a == NULL) return false;
  switch (a->value_case) {
    case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT64_VAL:
      *v = a->int64_val;
      return true;
    case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_UINT64_VAL:
      *v = (int64_t)a->uint64_val;
      return true;
    case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_INT32_VAL:
      *v = a->int32_val;
      return true;
    case CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_UINT32_VAL:
      *v = a->uint32_val;
      return true;
    default:
      return false;
  }
}

typedef struct coll {
  int64_t type, size;
  char pg[32];
} coll;

typedef struct file_colls {
  coll *v;
  size_t n;
} file_colls;

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static bool has_id(const uint64_t *ids, size_t n, uint64_t id) {
  return bsearch(&id, ids, n, sizeof *ids, cmp_u64) != NULL;
}

static void check_file(const char *path, long min_coll, long min_timed, long min_2deps,
                       bool want_meta, file_colls *fc) {
  size_t len, pos = 0, at, mlen;
  uint8_t *b = slurp(path, &len);
  if (!b) {
    fail(path, "%scannot read (%llu)", "", 0);
    return;
  }
  if (!next_msg(b, len, &pos, &at, &mlen)) {
    fail(path, "%sno GlobalMetadata message%llu", "", 0);
    free(b);
    return;
  }
  ChakraProtoMsg__GlobalMetadata *gm =
      chakra_proto_msg__global_metadata__unpack(NULL, mlen, b + at);
  if (!gm) fail(path, "%sthe first message is no GlobalMetadata (%llu bytes)", "", mlen);
  chakra_proto_msg__global_metadata__free_unpacked(gm, NULL);
  ChakraProtoMsg__Node **nodes = NULL;
  size_t n = 0, cap = 0;
  while (pos < len) {
    if (!next_msg(b, len, &pos, &at, &mlen)) {
      fail(path, "%sa length prefix runs past the end (byte %llu)", "", pos);
      break;
    }
    ChakraProtoMsg__Node *node = chakra_proto_msg__node__unpack(NULL, mlen, b + at);
    if (!node) {
      fail(path, "%sa Node message does not decode (byte %llu)", "", at);
      break;
    }
    if (n == cap) nodes = realloc(nodes, (cap = cap ? cap * 2 : 256) * sizeof *nodes);
    nodes[n++] = node;
  }
  uint64_t *ids = malloc((n ? n : 1) * sizeof *ids), *meta = malloc((n ? n : 1) * sizeof *meta);
  size_t nmeta = 0;
  for (size_t i = 0; i < n; i++) {
    ids[i] = nodes[i]->id;
    if (nodes[i]->type == CHAKRA_PROTO_MSG__NODE_TYPE__METADATA_NODE) meta[nmeta++] = nodes[i]->id;
  }
  qsort(ids, n, sizeof *ids, cmp_u64);
  qsort(meta, nmeta, sizeof *meta, cmp_u64);
  for (size_t i = 1; i < n; i++)
    if (ids[i] == ids[i - 1]) fail(path, "%snode id %llu twice", "", ids[i]);
  long colls = 0, timed = 0, two = 0, comps = 0;
  for (size_t i = 0; i < n; i++) {
    const ChakraProtoMsg__Node *x = nodes[i];
    for (size_t d = 0; d < x->n_ctrl_deps + x->n_data_deps; d++) {
      uint64_t dep = d < x->n_ctrl_deps ? x->ctrl_deps[d] : x->data_deps[d - x->n_ctrl_deps];
      if (!has_id(ids, n, dep)) fail(path, "%sa dependency names node %llu, absent", "", dep);
      if (has_id(meta, nmeta, dep)) fail(path, "%sa node depends on METADATA node %llu", "", dep);
    }
    if (dump) {
      static const char *const types[] = {"INVALID", "METADATA",  "MEM_LOAD",  "MEM_STORE",
                                          "COMP",    "COMM_SEND", "COMM_RECV", "COMM_COLL"};
      int64_t v, tid = -1;
      printf("node %llu %s %s", (unsigned long long)x->id,
             (unsigned)x->type < 8 ? types[x->type] : "?", x->name ? x->name : "");
      if (int_attr(attr(x, "comm_type"), &v)) printf(" comm_type=%lld", (long long)v);
      if (int_attr(attr(x, "comm_size"), &v)) printf(" comm_size=%lld", (long long)v);
      const ChakraProtoMsg__AttributeProto *g = attr(x, "pg_name");
      if (g && g->value_case == CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_STRING_VAL)
        printf(" pg=%s", g->string_val);
      int_attr(attr(x, "tid"), &tid);
      printf(" dur=%llu tid=%lld", (unsigned long long)x->duration_micros, (long long)tid);
      for (int k = 0; k < 2; k++) {
        size_t nd = k ? x->n_data_deps : x->n_ctrl_deps;
        const uint64_t *dv = k ? x->data_deps : x->ctrl_deps;
        printf(" %s=", k ? "data" : "ctrl");
        for (size_t d = 0; d < nd; d++) printf("%s%llu", d ? "," : "", (unsigned long long)dv[d]);
      }
      printf("\n");
    }
    const ChakraProtoMsg__AttributeProto *cpu = attr(x, "is_cpu_op");
    bool is_comm = x->type == CHAKRA_PROTO_MSG__NODE_TYPE__COMM_COLL_NODE ||
                   x->type == CHAKRA_PROTO_MSG__NODE_TYPE__COMM_SEND_NODE ||
                   x->type == CHAKRA_PROTO_MSG__NODE_TYPE__COMM_RECV_NODE;
    if (!cpu || cpu->value_case != CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_BOOL_VAL)
      fail(path, "%snode %llu has no bool attr is_cpu_op", "", x->id);
    else if (is_comm && cpu->bool_val)
      fail(path, "%sCOMM node %llu has is_cpu_op true", "", x->id);
    if (x->n_data_deps >= 2) two++;
    if (x->type == CHAKRA_PROTO_MSG__NODE_TYPE__COMP_NODE) {
      comps++;
      if (x->duration_micros > 0) timed++;
    }
    if (x->type == CHAKRA_PROTO_MSG__NODE_TYPE__COMM_COLL_NODE) {
      int64_t type, size;
      const ChakraProtoMsg__AttributeProto *pg = attr(x, "pg_name");
      if (!int_attr(attr(x, "comm_type"), &type) || type < 0 || type > 9)
        fail(path, "%sCOMM_COLL node %llu: no comm_type in 0..9", "", x->id);
      else if (!int_attr(attr(x, "comm_size"), &size))
        fail(path, "%sCOMM_COLL node %llu: no integer comm_size", "", x->id);
      else if (!pg || pg->value_case != CHAKRA_PROTO_MSG__ATTRIBUTE_PROTO__VALUE_STRING_VAL)
        fail(path, "%sCOMM_COLL node %llu: no string pg_name", "", x->id);
      else {
        if (min_coll > 0 && size <= 0) fail(path, "%sCOMM_COLL node %llu: comm_size 0", "", x->id);
        fc->v = realloc(fc->v, (fc->n + 1) * sizeof *fc->v);
        fc->v[fc->n].type = type;
        fc->v[fc->n].size = size;
        snprintf(fc->v[fc->n].pg, sizeof fc->v[fc->n].pg, "%s", pg->string_val);
        fc->n++;
      }
      colls++;
    }
    if (x->type == CHAKRA_PROTO_MSG__NODE_TYPE__METADATA_NODE) {
      const char *v = x->inputs ? x->inputs->values : "";
      size_t vl = strlen(v);
      if (vl < 6 || strncmp(v, "['[", 3) != 0 || strcmp(v + vl - 3, "]']") != 0 ||
          !strstr(v, "\"pg_name\"") || !strstr(v, "\"ranks\""))
        fail(path, "%sMETADATA node %llu: inputs.values is not ['<group list>']", "", x->id);
    }
  }
  printf(
      "%s: %zu nodes: %ld COMP (%ld timed), %ld COMM_COLL, %zu METADATA; %ld with >= 2 data deps\n",
      path, n, comps, timed, colls, nmeta, two);
  if (colls < min_coll)
    fail(path, "%sfewer COMM_COLL nodes than %llu", "", (unsigned long long)min_coll);
  if (timed < min_timed)
    fail(path, "%sfewer timed COMP nodes than %llu", "", (unsigned long long)min_timed);
  if (two < min_2deps)
    fail(path, "%sfewer nodes with 2+ data deps than %llu", "", (unsigned long long)min_2deps);
  if (want_meta && nmeta == 0) fail(path, "%sno METADATA node%llu", "", 0);
  for (size_t i = 0; i < n; i++) chakra_proto_msg__node__free_unpacked(nodes[i], NULL);
  free(nodes);
  free(ids);
  free(meta);
  free(b);
}

int main(int argc, char **argv) {
  long min_coll = 0, min_timed = 0, min_2deps = 0;
  bool want_meta = false, same = false;
  file_colls fcs[64] = {{0}};
  const char *paths[64];
  int nf = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--min-coll") && i + 1 < argc)
      min_coll = atol(argv[++i]);
    else if (!strcmp(argv[i], "--min-timed") && i + 1 < argc)
      min_timed = atol(argv[++i]);
    else if (!strcmp(argv[i], "--min-2deps") && i + 1 < argc)
      min_2deps = atol(argv[++i]);
    else if (!strcmp(argv[i], "--metadata"))
      want_meta = true;
    else if (!strcmp(argv[i], "--same-colls"))
      same = true;
    else if (!strcmp(argv[i], "--dump"))
      dump = true;
    else if (nf < 64)
      paths[nf++] = argv[i];
  }
  for (int f = 0; f < nf; f++)
    check_file(paths[f], min_coll, min_timed, min_2deps, want_meta, &fcs[f]);
  for (int f = 1; same && f < nf; f++) {
    bool eq = fcs[f].n == fcs[0].n;
    for (size_t i = 0; eq && i < fcs[0].n; i++)
      eq = fcs[f].v[i].type == fcs[0].v[i].type && fcs[f].v[i].size == fcs[0].v[i].size &&
           strcmp(fcs[f].v[i].pg, fcs[0].v[i].pg) == 0;
    if (!eq) fail(paths[f], "%snot the same collectives as the first file (%llu)", paths[0], 0);
  }
  for (int f = 0; f < nf; f++) free(fcs[f].v);
  if (nf == 0) fail("", "%sno file given%llu", "", 0);
  return failures ? 1 : 0;
}
