/* Traceback tables of the trace writer (tbtable.h).
 *
 * Three levels, each an open-addressing hash table owned by the writer thread:
 *  - sites: one per (module record, frame word) seen; each is symbolized once and then
 *    points at its frames. The record (etr__modules_in) is what a frame word resolves
 *    through, and a module closed and opened again unchanged keeps it (modules.c), so a
 *    plugin reloaded with tracebacks on adds no site, site sequence or frame per reload; a
 *    different file opened at the same addresses has another record, hence its own sites
 *    and names. Script frame words and addresses outside every module have no record;
 *    neither depends on the generation;
 *  - frames: one per unique written frame ({name, filename, line}, plus module, build id
 *    and offset in module mode), in first-seen order: the "frames" table;
 *  - site sequences: one per unique sequence of sites (return addresses), each mapped to
 *  - tracebacks: one per unique sequence of frames: the "tracebacks" table, whose index is
 *    the node's "traceback" attr. A new site sequence is symbolized when first seen (each
 *    address once, from the file that was mapped: etr__symbolize_frames_mapped), so two call
 *    sites that read the same (same function, file and line) share one entry.
 * Addresses are return addresses, so the call instruction is looked up (address - 1).
 *
 * Bounded tables. etr's reader (src/json/reader.c) reads a top-level value whole and refuses
 * one that takes more than its limit (16 MiB by default) to read: its text, and the values
 * parsed from it, which for a traceback's small indices is about 8 times their text. A
 * traceback is added to the tables only while both tables together stay under
 * ETR__TABLES_BUDGET by that measure (frame_cost, traceback_cost); a new one that would pass it is
 * left out (its ops carry no "traceback" attr, tracebacks_cut counts it), and so is any frame only
 * it would have used: a frame joins the "frames" table with the first traceback that uses it. A
 * traceback left out stays out, so the same stack gets the same answer every time the writer asks
 * (the binary log asks twice per event, a flight recorder at each dump).
 */
#include "observer/tbtable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json/reader.h"
#include "unwind/unwind.h"

/* The reader's default limit on one top-level value (ETR_READER_LIMIT_MB unset; CLI.md). A
 * test build (tests/trace/test_trace_tbbound.c, ETR_TEST_HOOKS) lowers it to 1 MiB, and runs
 * the tools with ETR_READER_LIMIT_MB=1, so a few thousand tracebacks reach it. */
#ifdef ETR_TEST_HOOKS
#define ETR__TABLES_READ_LIMIT ((1u << 20) * ETR_READER_TABLES_FACTOR)
#else
#define ETR__TABLES_READ_LIMIT ((16u << 20) * ETR_READER_TABLES_FACTOR)
#endif
/* What the two tables may take to read, by the reader's measure (frame_cost below): 7/8 of
 * its limit; the rest covers the arena's block ends (a block of 64 KiB wastes at most the
 * 4 KiB its last allocation did not find; larger ones are counted twice) and the header and
 * the "etr" object, which the reader keeps in the same arena. */
#define ETR__TABLES_BUDGET ((uint64_t)ETR__TABLES_READ_LIMIT / 8 * 7)

/* Stacks left out are remembered (as site sequences, about 100 bytes each at 20 frames), so
 * that each is counted once, up to this many; a new stack met past that is left out without
 * being kept, and counted through a filter of CUT_FILTER_BITS bits (1 MiB, made then: a stack
 * is counted when its hash's bit was not set yet, so one whose bit another set first is not
 * counted, about n / 2^24 of n such stacks: 2.6 % of 430 000). Until 2026-11-28 every stack was
 * kept for as long as the trace was open: a run whose stacks never repeat (recursion, an
 * interpreter's varying lines) grew the writer by that much per new stack, tables full or not. A
 * test build (ETR_TEST_HOOKS) reads the limit from etr__tbtab_test_cut_kept. */
#define CUT_KEPT_MAX 65536u
#define CUT_FILTER_BITS (1u << 23)
#ifdef ETR_TEST_HOOKS
uint32_t etr__tbtab_test_cut_kept = CUT_KEPT_MAX;
/* Called between an index's free and its replacement (old_slots: the freed index's size, 0
 * when there was none), the state a fork may copy from the writer. */
void (*etr__tbtab_test_rehash_gap)(uint32_t old_slots);
#define REHASH_GAP(old_slots) \
  (etr__tbtab_test_rehash_gap ? etr__tbtab_test_rehash_gap(old_slots) : (void)0)
uint32_t etr__tbtab_test_seqs; /* site sequences kept, for the test to read */
#define CUT_KEPT_LIMIT etr__tbtab_test_cut_kept
#else
#define CUT_KEPT_LIMIT CUT_KEPT_MAX
#define REHASH_GAP(old_slots) ((void)(old_slots))
#endif

#define TB_UNKNOWN UINT32_MAX   /* pub_of: not looked at yet */
#define TB_CUT (UINT32_MAX - 1) /* pub_of: left out, the tables were full */

typedef struct site {
  const etr__module *mod; /* the module record the word resolves through; NULL: none */
  uint64_t word;
  /* Its frames (several where calls were inlined at the address, innermost first):
   * site_frames[first .. first + count), count 0 until symbolized. */
  uint32_t first, count;
} site;

#define ETR__INLINE_MAX 64u /* frames one address may expand to (as etr symbolize) */

typedef struct frame {
  const char *name, *filename; /* owned by the symbolizer, the script table or `strings` */
  int64_t line;
  const char *module; /* module mode only (NULL otherwise) */
  char build_id[129];
  uint64_t offset;
} frame;

/* A chunk list of copied strings, freed together. */
typedef struct strblock {
  struct strblock *next;
  char data[];
} strblock;

struct etr__tbtab {
  etr_symbolize_mode mode;
  etr__symbolizer *sym;
  site *sites;
  uint32_t n_sites, cap_sites;
  uint32_t *site_index; /* hash slots: site index + 1, 0 = empty */
  uint32_t site_slots;
  uint32_t next_unresolved;
  uint32_t *site_frames; /* frame indices of the symbolized sites, back to back */
  uint32_t n_site_frames, cap_site_frames;
  frame *frames;
  uint32_t n_frames, cap_frames;
  uint32_t *frame_index;
  uint32_t frame_slots;
  /* tracebacks: site sequences stored back to back */
  uint32_t *seq;
  uint32_t seq_len, seq_cap;
  uint32_t *tb_off; /* start of each traceback in seq; tb_off[n_tbs] = seq_len */
  uint32_t n_tbs, cap_tbs;
  uint32_t *tb_index;
  uint32_t tb_slots;
  uint32_t *pub_of; /* site sequence -> its traceback, TB_UNKNOWN or TB_CUT */
  uint32_t cap_pub_of;
  /* tracebacks: frame sequences back to back, as the table is written */
  uint32_t *pseq;
  uint32_t pseq_len, pseq_cap;
  uint32_t *pub_off; /* pub_off[n_pub] = pseq_len */
  uint32_t n_pub, cap_pub;
  uint32_t *pub_index;
  uint32_t pub_slots;
  /* The "frames" table: the frames some traceback of the table uses, in first-use order. */
  uint32_t *frame_pub; /* frame -> its index in the table, UINT32_MAX: not in it */
  uint32_t cap_frame_pub;
  uint32_t *pub_frames; /* index in the table -> frame */
  uint32_t n_pub_frames, cap_pub_frames;
  uint64_t cost;                /* what the two tables take to read (frame_cost) */
  uint64_t cut;                 /* stacks left out: the tables were full */
  uint32_t cut_kept;            /* of them, those kept as site sequences (CUT_KEPT_MAX) */
  uint64_t *cut_filter;         /* the others' hashes (CUT_FILTER_BITS), made at the first */
  uint32_t frames_out, pub_out; /* written by etr__tbtab_emit_new so far */
  /* The module map of the generation last asked for: most words come in the current one,
   * and this saves the lock an older one takes (etr__modules_map). */
  uint64_t map_gen;
  const etr__modmap *map;
  bool map_valid;
  /* Recent raw sequences (gen and words) to their site sequence: most ops repeat a stack
   * seen moments ago, and this skips the per-frame site lookups for them. */
  struct {
    uint64_t hash, gen;
    uint32_t tb;
  } recent[1024];
  strblock *strings;
};

static inline uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

static uint64_t hash_str(uint64_t h, const char *s) {
  for (; s && *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

static bool grow(void **p, uint32_t *cap, size_t elem, uint32_t need) {
  if (need <= *cap) return true;
  uint32_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void *q = realloc(*p, (size_t)n * elem);
  if (!q) return false;
  *p = q;
  *cap = n;
  return true;
}

/* Rebuild an index of `slots` slots (a power of two) over n entries hashed by hash_of. */
static bool rehash(uint32_t **index, uint32_t *slots, uint32_t n, const etr__tbtab *t,
                   uint64_t (*hash_of)(const etr__tbtab *, uint32_t)) {
  uint32_t ns = *slots ? *slots * 2 : 256;
  uint32_t *ix = calloc(ns, sizeof *ix);
  if (!ix) return false;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t h = (uint32_t)hash_of(t, i) & (ns - 1);
    while (ix[h]) h = (h + 1) & (ns - 1);
    ix[h] = i + 1;
  }
  uint32_t old_slots = *index ? *slots : 0;
  free(*index);
  REHASH_GAP(old_slots); /* (the old index freed, still named: a test forks here) */
  *index = ix;
  *slots = ns;
  return true;
}

static uint64_t site_hash(const etr__tbtab *t, uint32_t i) {
  return mix(t->sites[i].word ^ mix((uint64_t)(uintptr_t)t->sites[i].mod));
}

static uint64_t frame_hash(const etr__tbtab *t, uint32_t i) {
  const frame *f = &t->frames[i];
  uint64_t h = hash_str(hash_str(0xcbf29ce484222325ull, f->name), f->filename);
  return mix(h ^ (uint64_t)f->line ^ mix(f->offset));
}

static uint64_t seq_hash(const uint32_t *s, size_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (size_t i = 0; i < n; i++) h = mix(h ^ s[i]) + i;
  return h;
}

static uint64_t tb_hash(const etr__tbtab *t, uint32_t i) {
  return seq_hash(t->seq + t->tb_off[i], t->tb_off[i + 1] - t->tb_off[i]);
}

static uint64_t pub_hash(const etr__tbtab *t, uint32_t i) {
  return seq_hash(t->pseq + t->pub_off[i], t->pub_off[i + 1] - t->pub_off[i]);
}

static const char *copy_str(etr__tbtab *t, const char *s) {
  size_t n = strlen(s);
  strblock *b = malloc(sizeof *b + n + 1);
  if (!b) return "";
  memcpy(b->data, s, n + 1);
  b->next = t->strings;
  t->strings = b;
  return b->data;
}

etr__tbtab *etr__tbtab_new(etr_symbolize_mode mode) {
  etr__tbtab *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->mode = mode;
  if (!grow((void **)&t->tb_off, &t->cap_tbs, sizeof *t->tb_off, 1)) {
    free(t);
    return NULL;
  }
  t->tb_off[0] = 0;
  if (!grow((void **)&t->pub_off, &t->cap_pub, sizeof *t->pub_off, 1)) {
    free(t->tb_off);
    free(t);
    return NULL;
  }
  t->pub_off[0] = 0;
  return t;
}

void etr__tbtab_free(etr__tbtab *t) {
  if (!t) return;
  etr__symbolizer_give_back(t->sym);
  free(t->cut_filter);
  free(t->sites);
  free(t->site_index);
  free(t->site_frames);
  free(t->frames);
  free(t->frame_index);
  free(t->seq);
  free(t->tb_off);
  free(t->tb_index);
  free(t->pub_of);
  free(t->pseq);
  free(t->pub_off);
  free(t->pub_index);
  free(t->frame_pub);
  free(t->pub_frames);
  while (t->strings) {
    strblock *n = t->strings->next;
    free(t->strings);
    t->strings = n;
  }
  free(t);
}

/* The module record native word resolves through in generation gen, NULL when none. */
static const etr__module *module_of(etr__tbtab *t, uint64_t gen, uint64_t word) {
  if (!t->map_valid || t->map_gen != gen) {
    t->map = etr__modules_map(gen);
    t->map_gen = gen;
    t->map_valid = t->map != NULL; /* (none when memory ran out: ask again next time) */
  }
  return etr__modules_in(t->map, (uintptr_t)word);
}

static uint32_t site_of(etr__tbtab *t, uint64_t gen, uint64_t word) {
  /* (script ids do not depend on modules) */
  const etr__module *mod = (word & ETR__SCRIPT_TAG) ? NULL : module_of(t, gen, word);
  if ((t->n_sites + 1) * 2 > t->site_slots &&
      !rehash(&t->site_index, &t->site_slots, t->n_sites, t, site_hash))
    return UINT32_MAX;
  uint32_t mask = t->site_slots - 1;
  uint32_t h = (uint32_t)mix(word ^ mix((uint64_t)(uintptr_t)mod)) & mask;
  for (; t->site_index[h]; h = (h + 1) & mask) {
    const site *s = &t->sites[t->site_index[h] - 1];
    if (s->word == word && s->mod == mod) return t->site_index[h] - 1;
  }
  if (!grow((void **)&t->sites, &t->cap_sites, sizeof *t->sites, t->n_sites + 1)) return UINT32_MAX;
  t->sites[t->n_sites] = (site){mod, word, 0, 0};
  t->site_index[h] = ++t->n_sites;
  return t->n_sites - 1;
}

static uint64_t raw_hash(uint64_t gen, const uint64_t *words, uint32_t n) {
  uint64_t h = mix(gen ^ 0x9e3779b97f4a7c15ull) ^ n;
  for (uint32_t i = 0; i < n; i++) h = mix(h ^ words[i]) + i;
  return h | 1; /* 0 marks an empty entry */
}

/* Whether site sequence tb is exactly these words (the caller compared the generation:
 * within one, a word always resolves through the same record). */
static bool same_raw(const etr__tbtab *t, uint32_t tb, const uint64_t *words, uint32_t n) {
  if (t->tb_off[tb + 1] - t->tb_off[tb] != n) return false;
  const uint32_t *seq = t->seq + t->tb_off[tb];
  for (uint32_t i = 0; i < n; i++)
    if (t->sites[seq[i]].word != words[i]) return false;
  return true;
}

static uint64_t intern_sites(etr__tbtab *t, uint64_t gen, const uint64_t *words, uint32_t n);
static uint32_t traceback_of(etr__tbtab *t, uint32_t sites);

/* The traceback of site sequence i, found (symbolizing it) the first time; UINT64_MAX when
 * it was left out (the tables were full) or memory ran out. */
static uint64_t public_index(etr__tbtab *t, uint32_t i) {
  if (t->pub_of[i] == TB_UNKNOWN) {
    etr__tbtab_symbolize(t);
    t->pub_of[i] = traceback_of(t, i);
  }
  return t->pub_of[i] >= TB_CUT ? UINT64_MAX : t->pub_of[i];
}

uint64_t etr__tbtab_intern(etr__tbtab *t, uint64_t gen, const uint64_t *words, uint32_t n) {
  uint64_t h = raw_hash(gen, words, n);
  size_t slot = (size_t)(h >> 54); /* 1024 entries */
  if (t->recent[slot].hash == h && t->recent[slot].gen == gen &&
      same_raw(t, t->recent[slot].tb, words, n))
    return public_index(t, t->recent[slot].tb);
  uint64_t sites = intern_sites(t, gen, words, n);
  if (sites == UINT64_MAX) return UINT64_MAX;
  t->recent[slot].hash = h;
  t->recent[slot].gen = gen;
  t->recent[slot].tb = (uint32_t)sites;
  return public_index(t, (uint32_t)sites);
}

static uint64_t intern_sites(etr__tbtab *t, uint64_t gen, const uint64_t *words, uint32_t n) {
  /* The candidate sequence is appended to seq, and kept only when it is new. */
  if (!grow((void **)&t->seq, &t->seq_cap, sizeof *t->seq, t->seq_len + n)) return UINT64_MAX;
  uint32_t *cand = t->seq + t->seq_len;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t s = site_of(t, gen, words[i]);
    if (s == UINT32_MAX) return UINT64_MAX;
    cand[i] = s;
  }
  if ((t->n_tbs + 1) * 2 > t->tb_slots && !rehash(&t->tb_index, &t->tb_slots, t->n_tbs, t, tb_hash))
    return UINT64_MAX;
  uint32_t mask = t->tb_slots - 1;
  uint32_t h = (uint32_t)seq_hash(cand, n) & mask;
  for (; t->tb_index[h]; h = (h + 1) & mask) {
    uint32_t i = t->tb_index[h] - 1;
    uint32_t len = t->tb_off[i + 1] - t->tb_off[i];
    if (len == n && memcmp(t->seq + t->tb_off[i], cand, n * sizeof *cand) == 0) return i;
  }
  if (t->cut_kept >= CUT_KEPT_LIMIT) { /* new, and the tables are long full: left out */
    uint64_t bit = seq_hash(cand, n) % CUT_FILTER_BITS;
    if (!t->cut_filter && !(t->cut_filter = calloc(CUT_FILTER_BITS / 64, sizeof(uint64_t))))
      return UINT64_MAX;
    if (!(t->cut_filter[bit / 64] & (uint64_t)1 << (bit % 64))) {
      t->cut_filter[bit / 64] |= (uint64_t)1 << (bit % 64);
      t->cut++;
    }
    return UINT64_MAX;
  }
  if (!grow((void **)&t->tb_off, &t->cap_tbs, sizeof *t->tb_off, t->n_tbs + 2) ||
      !grow((void **)&t->pub_of, &t->cap_pub_of, sizeof *t->pub_of, t->n_tbs + 1))
    return UINT64_MAX;
  t->pub_of[t->n_tbs] = TB_UNKNOWN;
  t->seq_len += n;
  t->tb_off[++t->n_tbs] = t->seq_len;
  t->tb_index[h] = t->n_tbs;
#ifdef ETR_TEST_HOOKS
  etr__tbtab_test_seqs = t->n_tbs;
#endif
  return t->n_tbs - 1;
}

/* The frames-table index of f, adding it when new. */
static uint32_t frame_of(etr__tbtab *t, const frame *f) {
  if ((t->n_frames + 1) * 2 > t->frame_slots &&
      !rehash(&t->frame_index, &t->frame_slots, t->n_frames, t, frame_hash))
    return UINT32_MAX;
  if (!grow((void **)&t->frames, &t->cap_frames, sizeof *t->frames, t->n_frames + 1) ||
      !grow((void **)&t->frame_pub, &t->cap_frame_pub, sizeof *t->frame_pub, t->n_frames + 1))
    return UINT32_MAX;
  t->frames[t->n_frames] = *f; /* hashed in place, kept only if new */
  uint32_t mask = t->frame_slots - 1;
  uint32_t h = (uint32_t)frame_hash(t, t->n_frames) & mask;
  for (; t->frame_index[h]; h = (h + 1) & mask) {
    const frame *g = &t->frames[t->frame_index[h] - 1];
    if (g->line == f->line && g->offset == f->offset && !strcmp(g->name, f->name) &&
        !strcmp(g->filename, f->filename) && (g->module == NULL) == (f->module == NULL) &&
        (!g->module || (!strcmp(g->module, f->module) && !strcmp(g->build_id, f->build_id))))
      return t->frame_index[h] - 1;
  }
  t->frame_pub[t->n_frames] = UINT32_MAX;
  t->frame_index[h] = ++t->n_frames;
  return t->n_frames - 1;
}

static const char *base_name(const char *path) {
  const char *b = strrchr(path, '/');
  return b ? b + 1 : path;
}

/* Append frame f to site s's frames. */
static void add_site_frame(etr__tbtab *t, site *s, const frame *f) {
  uint32_t idx = frame_of(t, f);
  if (idx == UINT32_MAX || !grow((void **)&t->site_frames, &t->cap_site_frames,
                                 sizeof *t->site_frames, t->n_site_frames + 1))
    return; /* memory ran out: the frame is left out of the tracebacks that use it */
  if (s->count == 0) s->first = t->n_site_frames;
  t->site_frames[t->n_site_frames++] = idx;
  s->count++;
}

static void resolve(etr__tbtab *t, site *s) {
  frame f;
  memset(&f, 0, sizeof f);
  f.name = "??";
  f.filename = "";
  char buf[512];
  if (s->word & ETR__SCRIPT_TAG) {
    etr_script_frame sf;
    if (etr__script_frame_get(s->word & ~ETR__SCRIPT_TAG, &sf) == 0) {
      f.name = sf.name ? sf.name : "??";
      f.filename = sf.filename ? sf.filename : "";
      f.line = sf.line;
    }
  } else {
    uintptr_t ip = (uintptr_t)s->word;
    const etr__module *m = s->mod;
    uintptr_t call = ip ? ip - 1 : ip; /* the call instruction, not the return address */
    if (!m) {
      snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)ip);
      f.name = copy_str(t, buf);
    } else {
      uint64_t vaddr = call - m->bias;
      int n = -1;
      etr__symbol sym[ETR__INLINE_MAX];
      if (t->mode == ETR_SYMBOLIZE_FULL) {
        if (!t->sym) t->sym = etr__symbolizer_take();
        /* dladdr may answer only while this record is still what is loaded there. */
        uintptr_t live = etr__modules_find(etr__modules_generation(), ip) == m ? call : 0;
        if (t->sym) n = etr__symbolize_frames_mapped(t->sym, m, vaddr, live, sym, ETR__INLINE_MAX);
      }
      if (n > 0) {
        /* Calls inlined at this address come first (innermost), the real function last. */
        for (int i = 0; i < n; i++) {
          f.name = sym[i].name && *sym[i].name ? sym[i].name : "??";
          f.filename = sym[i].filename ? sym[i].filename : m->path;
          f.line = sym[i].line;
          if (i + 1 < n) add_site_frame(t, s, &f);
        }
      } else { /* module mode, or the symbolizer could not run: module+offset */
        snprintf(buf, sizeof buf, "%s+0x%llx", base_name(m->path), (unsigned long long)vaddr);
        f.name = copy_str(t, buf);
        f.filename = copy_str(t, m->path);
        if (t->mode == ETR_SYMBOLIZE_MODULE) {
          f.module = f.filename;
          f.offset = vaddr;
          for (unsigned i = 0; i < m->build_id_len && i < 64; i++)
            snprintf(f.build_id + 2 * i, 3, "%02x", m->build_id[i]);
        }
      }
    }
  }
  add_site_frame(t, s, &f);
}

/* What the reader's arena takes for an allocation of n bytes: rounded to 16, and twice that
 * past 4 KiB (it may leave that much of a block unused). */
static uint64_t arena_cost(uint64_t n) {
  n = (n + 15) & ~(uint64_t)15;
  return n > 4096 ? 2 * n : n;
}

/* A string value or key as the reader keeps it: its bytes (each byte that may be invalid
 * UTF-8 counted as the 3 bytes of U+FFFD, though the writer has replaced those) and a NUL. */
static uint64_t str_cost(const char *s) {
  uint64_t n = 1;
  for (; *s; s++) n += (unsigned char)*s < 0x80 ? 1 : 3;
  return arena_cost(n);
}

/* What an element of either table takes to read. Every element: its slot on the
 * reader's member stack while its array is read (40 bytes: key, key length, value) and its
 * value in the array (24 bytes), both counted. A frame: its members (40 bytes each), their
 * keys and strings. A traceback: its indices (24 bytes each). The reader measures the same
 * way with either parser (docs/CLI.md, "Reader limit"). */
#define ELEM_COST 64u
static uint64_t frame_cost(const frame *f) {
  uint64_t members = f->module ? 6 : 3;
  uint64_t c = ELEM_COST + arena_cost(members * 40) + members * 16 /* keys, < 16 bytes each */ +
               str_cost(f->name) + str_cost(f->filename);
  if (f->module) c += str_cost(f->module) + str_cost(f->build_id);
  return c;
}
static uint64_t traceback_cost(uint32_t n) {
  return ELEM_COST + (n ? arena_cost((uint64_t)n * 24) : 0);
}

/* The traceback (frame sequence) of site sequence i, whose sites are symbolized: added when
 * new and when it fits in the tables, with the frames it is the first to use. UINT32_MAX when
 * memory runs out, TB_CUT when it does not fit. */
static uint32_t traceback_of(etr__tbtab *t, uint32_t i) {
  uint32_t need = 0;
  for (uint32_t k = t->tb_off[i]; k < t->tb_off[i + 1]; k++) need += t->sites[t->seq[k]].count;
  if (!grow((void **)&t->pseq, &t->pseq_cap, sizeof *t->pseq, t->pseq_len + need))
    return UINT32_MAX;
  uint32_t *cand = t->pseq + t->pseq_len, n = 0;
  for (uint32_t k = t->tb_off[i]; k < t->tb_off[i + 1]; k++) {
    const site *st = &t->sites[t->seq[k]];
    for (uint32_t j = 0; j < st->count; j++) cand[n++] = t->site_frames[st->first + j];
  }
  if ((t->n_pub + 1) * 2 > t->pub_slots &&
      !rehash(&t->pub_index, &t->pub_slots, t->n_pub, t, pub_hash))
    return UINT32_MAX;
  uint32_t mask = t->pub_slots - 1;
  uint32_t h = (uint32_t)seq_hash(cand, n) & mask;
  for (; t->pub_index[h]; h = (h + 1) & mask) {
    uint32_t p = t->pub_index[h] - 1;
    if (t->pub_off[p + 1] - t->pub_off[p] == n &&
        memcmp(t->pseq + t->pub_off[p], cand, n * sizeof *cand) == 0)
      return p;
  }
  if (!grow((void **)&t->pub_off, &t->cap_pub, sizeof *t->pub_off, t->n_pub + 2) ||
      !grow((void **)&t->pub_frames, &t->cap_pub_frames, sizeof *t->pub_frames,
            t->n_pub_frames + n))
    return UINT32_MAX;
  /* Its new frames get the next indices of the frames table, taken back if it does not fit. */
  uint64_t cost = traceback_cost(n);
  uint32_t added = 0;
  for (uint32_t k = 0; k < n; k++) {
    uint32_t f = cand[k];
    if (t->frame_pub[f] != UINT32_MAX) continue;
    t->frame_pub[f] = t->n_pub_frames + added;
    t->pub_frames[t->n_pub_frames + added++] = f;
    cost += frame_cost(&t->frames[f]);
  }
  if (t->cost + cost > ETR__TABLES_BUDGET) {
    for (uint32_t k = 0; k < added; k++)
      t->frame_pub[t->pub_frames[t->n_pub_frames + k]] = UINT32_MAX;
    t->cut++;
    t->cut_kept++;
    return TB_CUT;
  }
  t->cost += cost;
  t->n_pub_frames += added;
  t->pseq_len += n;
  t->pub_off[++t->n_pub] = t->pseq_len;
  t->pub_index[h] = t->n_pub;
  return t->n_pub - 1;
}

void etr__tbtab_symbolize(etr__tbtab *t) {
  for (; t->next_unresolved < t->n_sites; t->next_unresolved++)
    resolve(t, &t->sites[t->next_unresolved]);
}

static char *put_frame(char *o, const frame *f, uint64_t *replaced) {
  o = ETR__PUT_LIT(o, "{\"name\": ");
  o = etr__put_str(o, f->name, strlen(f->name), replaced);
  o = ETR__PUT_LIT(o, ", \"filename\": ");
  o = etr__put_str(o, f->filename, strlen(f->filename), replaced);
  o = ETR__PUT_LIT(o, ", \"line\": ");
  o = etr__put_i64(o, f->line);
  if (f->module) {
    o = ETR__PUT_LIT(o, ", \"module\": ");
    o = etr__put_str(o, f->module, strlen(f->module), replaced);
    o = ETR__PUT_LIT(o, ", \"build_id\": \"");
    size_t n = strlen(f->build_id);
    memcpy(o, f->build_id, n);
    o += n;
    o = ETR__PUT_LIT(o, "\", \"offset\": ");
    o = etr__put_u64(o, f->offset);
  }
  *o++ = '}';
  return o;
}

/* Traceback i's indices in the frames table, "[a, b, c]". */
static void put_traceback(const etr__tbtab *t, etr__jw *w, uint32_t i) {
  etr__jw_char(w, '[');
  for (uint32_t k = t->pub_off[i]; k < t->pub_off[i + 1]; k++) {
    if (k > t->pub_off[i]) ETR__JW_LIT(w, ", ");
    etr__jw_u64(w, t->frame_pub[t->pseq[k]]);
  }
  etr__jw_char(w, ']');
}

/* Frame i as a table element (with the line break and indent the tables use). */
static void put_frame_elem(etr__jw *w, const frame *f, bool first) {
  size_t max = 200 + ETR__ESCAPED_MAX(strlen(f->name) + strlen(f->filename)) +
               (f->module ? ETR__ESCAPED_MAX(strlen(f->module)) + 160 : 0);
  char *o = etr__jw_begin(w, max);
  if (!o) return;
  if (!first) *o++ = ',';
  o = ETR__PUT_LIT(o, "\n    ");
  o = put_frame(o, f, &w->replaced);
  etr__jw_end(w, o);
}

void etr__tbtab_emit_new(etr__tbtab *t, etr__jw *frames, etr__jw *tbs, uint32_t *n_frames,
                         uint32_t *n_tbs) {
  etr__tbtab_symbolize(t);
  *n_frames = t->n_pub_frames - t->frames_out;
  *n_tbs = t->n_pub - t->pub_out;
  for (uint32_t i = t->frames_out; i < t->n_pub_frames; i++)
    put_frame_elem(frames, &t->frames[t->pub_frames[i]], i == t->frames_out);
  for (uint32_t i = t->pub_out; i < t->n_pub; i++) {
    if (i > t->pub_out) etr__jw_char(tbs, ',');
    ETR__JW_LIT(tbs, "\n    ");
    put_traceback(t, tbs, i);
  }
  t->frames_out = t->n_pub_frames;
  t->pub_out = t->n_pub;
}

void etr__tbtab_rewind(etr__tbtab *t) { t->frames_out = t->pub_out = 0; }

void etr__tbtab_emit(etr__tbtab *t, etr__jw *w) {
  etr__tbtab_symbolize(t);
  ETR__JW_LIT(w, "\"frames\": [");
  for (uint32_t i = 0; i < t->n_pub_frames; i++)
    put_frame_elem(w, &t->frames[t->pub_frames[i]], i == 0);
  ETR__JW_LIT(w, "\n  ],\n  \"tracebacks\": [");
  for (uint32_t i = 0; i < t->n_pub; i++) {
    if (i) etr__jw_char(w, ',');
    ETR__JW_LIT(w, "\n    ");
    put_traceback(t, w, i);
  }
  ETR__JW_LIT(w, "\n  ],\n  ");
}

uint64_t etr__tbtab_tracebacks(const etr__tbtab *t) { return t ? t->n_pub : 0; }
uint64_t etr__tbtab_frames(const etr__tbtab *t) { return t ? t->n_pub_frames : 0; }
uint64_t etr__tbtab_cut(const etr__tbtab *t) { return t ? t->cut : 0; }
void etr__tbtab_kept(const etr__tbtab *t, uint64_t *sites, uint64_t *stacks) {
  *sites = t ? t->n_sites : 0;
  *stacks = t ? t->n_tbs : 0;
}
