/* DWARF call-frame information reduced to simple x86_64 unwind rules (see cfi.h).
 *
 * The search goes .eh_frame_hdr (binary search table, encoding datarel|sdata4 as every
 * GNU and LLVM linker writes it) -> FDE -> CIE, then runs the CIE's initial instructions
 * and the FDE's instructions up to pc, tracking only what the walker needs: the CFA rule,
 * and the rules of rbp (DWARF 6) and the return-address column (16 on x86_64).
 */
#include "unwind/cfi.h"

#include <string.h>

#if defined(__x86_64__)

enum { REG_RBP_ = 6, REG_RSP_ = 7, MAX_STATE_STACK = 8 };

/* DW_EH_PE_* pointer encodings */
enum {
  PE_ABSPTR = 0x00,
  PE_ULEB = 0x01,
  PE_UDATA2 = 0x02,
  PE_UDATA4 = 0x03,
  PE_UDATA8 = 0x04,
  PE_SLEB = 0x09,
  PE_SDATA2 = 0x0a,
  PE_SDATA4 = 0x0b,
  PE_SDATA8 = 0x0c,
  PE_PCREL = 0x10,
  PE_DATAREL = 0x30,
  PE_INDIRECT = 0x80,
  PE_OMIT = 0xff
};

typedef struct rd {
  const uint8_t *p, *end;
  bool bad;
} rd;

static uint64_t rd_uleb(rd *r) {
  uint64_t v = 0;
  unsigned shift = 0;
  while (r->p < r->end) {
    uint8_t b = *r->p++;
    if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
    shift += 7;
    if (!(b & 0x80)) return v;
  }
  r->bad = true;
  return 0;
}

static int64_t rd_sleb(rd *r) {
  int64_t v = 0;
  unsigned shift = 0;
  while (r->p < r->end) {
    uint8_t b = *r->p++;
    if (shift < 64) v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
    shift += 7;
    if (!(b & 0x80)) {
      if (shift < 64 && (b & 0x40)) v |= -((int64_t)1 << shift);
      return v;
    }
  }
  r->bad = true;
  return 0;
}

static uint64_t rd_fixed(rd *r, size_t n) {
  if ((size_t)(r->end - r->p) < n) {
    r->bad = true;
    r->p = r->end;
    return 0;
  }
  uint64_t v = 0;
  switch (n) {
    case 1:
      v = r->p[0];
      break;
    case 2: {
      uint16_t x;
      memcpy(&x, r->p, 2);
      v = x;
      break;
    }
    case 4: {
      uint32_t x;
      memcpy(&x, r->p, 4);
      v = x;
      break;
    }
    default:
      memcpy(&v, r->p, 8);
      break;
  }
  r->p += n;
  return v;
}

/* A pointer in encoding enc; base is the data-relative base (the .eh_frame_hdr start). */
static uintptr_t rd_encoded(rd *r, uint8_t enc, uintptr_t datarel) {
  if (enc == PE_OMIT) return 0;
  uintptr_t here = (uintptr_t)r->p;
  uint64_t v;
  switch (enc & 0x0f) {
    case PE_ABSPTR:
      v = rd_fixed(r, 8);
      break;
    case PE_ULEB:
      v = rd_uleb(r);
      break;
    case PE_UDATA2:
      v = rd_fixed(r, 2);
      break;
    case PE_UDATA4:
      v = rd_fixed(r, 4);
      break;
    case PE_UDATA8:
      v = rd_fixed(r, 8);
      break;
    case PE_SLEB:
      v = (uint64_t)rd_sleb(r);
      break;
    case PE_SDATA2:
      v = (uint64_t)(int64_t)(int16_t)rd_fixed(r, 2);
      break;
    case PE_SDATA4:
      v = (uint64_t)(int64_t)(int32_t)rd_fixed(r, 4);
      break;
    case PE_SDATA8:
      v = rd_fixed(r, 8);
      break;
    default:
      r->bad = true;
      return 0;
  }
  switch (enc & 0x70) {
    case 0:
      break;
    case PE_PCREL:
      v += here;
      break;
    case PE_DATAREL:
      v += datarel;
      break;
    default:
      r->bad = true;
      return 0; /* textrel, funcrel, aligned: not used on x86_64 */
  }
  if (enc & PE_INDIRECT) {
    uintptr_t a = (uintptr_t)v;
    memcpy(&v, (const void *)a, sizeof v);
  }
  return (uintptr_t)v;
}

/* Only the registers we need. */
typedef enum rkind { R_SAME = 0, R_UNDEF, R_OFFSET, R_OTHER } rkind;
typedef struct rrule {
  rkind kind;
  int64_t off;
} rrule;
typedef struct row {
  int cfa_reg; /* DWARF number, -1 for an expression */
  int64_t cfa_off;
  rrule rbp, ra;
} row;

typedef struct cie {
  uint64_t code_align;
  int64_t data_align;
  uint64_t ra_reg;
  uint8_t fde_enc;
  bool has_z, signal;
  const uint8_t *insns, *insns_end;
} cie;

/* Length field of a CIE/FDE: returns the start of its content, sets *end. */
static const uint8_t *entry_bounds(const uint8_t *p, const uint8_t **end) {
  uint32_t len32;
  memcpy(&len32, p, 4);
  p += 4;
  uint64_t len = len32;
  if (len32 == 0xffffffffu) {
    memcpy(&len, p, 8);
    p += 8;
  }
  if (len == 0 || len > ((uint64_t)1 << 30)) return NULL;
  *end = p + len;
  return p;
}

static bool parse_cie(const uint8_t *c, cie *out) {
  const uint8_t *end;
  const uint8_t *p = entry_bounds(c, &end);
  if (!p) return false;
  rd r = {p, end, false};
  if (rd_fixed(&r, 4) != 0) return false; /* CIE id in .eh_frame is 0 */
  uint8_t version = (uint8_t)rd_fixed(&r, 1);
  if (version != 1 && version != 3 && version != 4) return false;
  const char *aug = (const char *)r.p;
  size_t auglen = strnlen(aug, (size_t)(r.end - r.p));
  r.p += auglen + 1;
  if (aug[0] == 'e' && aug[1] == 'h') return false; /* ancient GCC layout */
  if (version == 4) {
    if (rd_fixed(&r, 1) != 8) return false; /* address size */
    rd_fixed(&r, 1);                        /* segment selector size */
  }
  out->code_align = rd_uleb(&r);
  out->data_align = rd_sleb(&r);
  out->ra_reg = version == 1 ? rd_fixed(&r, 1) : rd_uleb(&r);
  out->fde_enc = PE_ABSPTR;
  out->has_z = false;
  out->signal = false;
  const uint8_t *aug_end = NULL;
  for (size_t i = 0; i < auglen; i++) {
    switch (aug[i]) {
      case 'z': {
        out->has_z = true;
        uint64_t n = rd_uleb(&r);
        if (n > (uint64_t)(r.end - r.p)) return false;
        aug_end = r.p + n;
        break;
      }
      case 'R':
        out->fde_enc = (uint8_t)rd_fixed(&r, 1);
        break;
      case 'L':
        rd_fixed(&r, 1);
        break;
      case 'P': {
        uint8_t enc = (uint8_t)rd_fixed(&r, 1);
        rd_encoded(&r, enc & 0x7f, 0); /* skip the personality pointer, not dereferenced */
        break;
      }
      case 'S':
        out->signal = true;
        break;
      case 'B':
        break;
      default:
        /* unknown augmentation: only skippable with 'z' */
        if (!aug_end) return false;
        i = auglen;
        break;
    }
    if (r.bad) return false;
  }
  if (aug_end) r.p = aug_end;
  if (r.bad || out->code_align == 0) return false;
  out->insns = r.p;
  out->insns_end = end;
  return true;
}

static void set_reg(row *rw, uint64_t reg, uint64_t ra_reg, rkind k, int64_t off) {
  rrule v = {k, off};
  if (reg == REG_RBP_)
    rw->rbp = v;
  else if (reg == ra_reg)
    rw->ra = v;
  /* other registers: not needed to walk */
}

static void restore_reg(row *rw, const row *init, uint64_t reg, uint64_t ra_reg) {
  if (reg == REG_RBP_)
    rw->rbp = init->rbp;
  else if (reg == ra_reg)
    rw->ra = init->ra;
}

/* Run instructions [p, end) from loc; stop before the first row that starts after pc.
 * init: the row after the CIE's instructions (NULL while running them). Returns false on
 * an instruction we cannot follow. */
static bool run_cfa(const uint8_t *p, const uint8_t *end, const cie *ci, uintptr_t loc,
                    uintptr_t pc, row *rw, const row *init) {
  row stack[MAX_STATE_STACK];
  int depth = 0;
  rd r = {p, end, false};
  while (r.p < r.end && !r.bad) {
    uint8_t op = *r.p++;
    uint8_t hi = op & 0xc0, lo = op & 0x3f;
    if (hi == 0x40) { /* advance_loc */
      loc += lo * ci->code_align;
      if (loc > pc) return true;
      continue;
    }
    if (hi == 0x80) { /* offset */
      set_reg(rw, lo, ci->ra_reg, R_OFFSET, (int64_t)rd_uleb(&r) * ci->data_align);
      continue;
    }
    if (hi == 0xc0) { /* restore */
      if (!init) return false;
      restore_reg(rw, init, lo, ci->ra_reg);
      continue;
    }
    switch (op) {
      case 0x00:
        break;   /* nop */
      case 0x01: /* set_loc */
        loc = rd_encoded(&r, ci->fde_enc, 0);
        if (loc > pc) return true;
        break;
      case 0x02:
        loc += rd_fixed(&r, 1) * ci->code_align;
        if (loc > pc) return true;
        break;
      case 0x03:
        loc += rd_fixed(&r, 2) * ci->code_align;
        if (loc > pc) return true;
        break;
      case 0x04:
        loc += rd_fixed(&r, 4) * ci->code_align;
        if (loc > pc) return true;
        break;
      case 0x05: { /* offset_extended */
        uint64_t reg = rd_uleb(&r);
        set_reg(rw, reg, ci->ra_reg, R_OFFSET, (int64_t)rd_uleb(&r) * ci->data_align);
        break;
      }
      case 0x06: /* restore_extended */
        if (!init) return false;
        restore_reg(rw, init, rd_uleb(&r), ci->ra_reg);
        break;
      case 0x07:
        set_reg(rw, rd_uleb(&r), ci->ra_reg, R_UNDEF, 0);
        break;
      case 0x08:
        set_reg(rw, rd_uleb(&r), ci->ra_reg, R_SAME, 0);
        break;
      case 0x09: { /* register: reg1 in reg2 */
        uint64_t reg = rd_uleb(&r);
        rd_uleb(&r);
        set_reg(rw, reg, ci->ra_reg, R_OTHER, 0);
        break;
      }
      case 0x0a: /* remember_state */
        if (depth == MAX_STATE_STACK) return false;
        stack[depth++] = *rw;
        break;
      case 0x0b: /* restore_state: the CFA rule is restored too (as GCC's unwinder does) */
        if (depth == 0) return false;
        *rw = stack[--depth];
        break;
      case 0x0c: /* def_cfa */
        rw->cfa_reg = (int)rd_uleb(&r);
        rw->cfa_off = (int64_t)rd_uleb(&r);
        break;
      case 0x0d:
        rw->cfa_reg = (int)rd_uleb(&r);
        break;
      case 0x0e:
        rw->cfa_off = (int64_t)rd_uleb(&r);
        break;
      case 0x0f: { /* def_cfa_expression */
        uint64_t n = rd_uleb(&r);
        if (n > (uint64_t)(r.end - r.p)) return false;
        r.p += n;
        rw->cfa_reg = -1;
        break;
      }
      case 0x10:   /* expression */
      case 0x16: { /* val_expression */
        uint64_t reg = rd_uleb(&r);
        uint64_t n = rd_uleb(&r);
        if (n > (uint64_t)(r.end - r.p)) return false;
        r.p += n;
        set_reg(rw, reg, ci->ra_reg, R_OTHER, 0);
        break;
      }
      case 0x11: { /* offset_extended_sf */
        uint64_t reg = rd_uleb(&r);
        set_reg(rw, reg, ci->ra_reg, R_OFFSET, rd_sleb(&r) * ci->data_align);
        break;
      }
      case 0x12: /* def_cfa_sf */
        rw->cfa_reg = (int)rd_uleb(&r);
        rw->cfa_off = rd_sleb(&r) * ci->data_align;
        break;
      case 0x13:
        rw->cfa_off = rd_sleb(&r) * ci->data_align;
        break;
      case 0x14:   /* val_offset */
      case 0x15: { /* val_offset_sf */
        uint64_t reg = rd_uleb(&r);
        if (op == 0x14)
          rd_uleb(&r);
        else
          rd_sleb(&r);
        set_reg(rw, reg, ci->ra_reg, R_OTHER, 0);
        break;
      }
      case 0x2e:
        rd_uleb(&r);
        break;     /* GNU_args_size */
      case 0x2f: { /* GNU_negative_offset_extended */
        uint64_t reg = rd_uleb(&r);
        set_reg(rw, reg, ci->ra_reg, R_OFFSET, -(int64_t)rd_uleb(&r) * ci->data_align);
        break;
      }
      default:
        return false;
    }
  }
  return !r.bad;
}

/* The FDE whose table entry is the last one with initial location <= pc, or NULL. */
static const uint8_t *find_fde(uintptr_t hdr, uintptr_t pc) {
  const uint8_t *h = (const uint8_t *)hdr;
  if (h[0] != 1) return NULL;
  uint8_t ptr_enc = h[1], count_enc = h[2], table_enc = h[3];
  if (count_enc == PE_OMIT || table_enc != (PE_DATAREL | PE_SDATA4)) return NULL;
  rd r = {h + 4, h + 64, false};
  rd_encoded(&r, ptr_enc, hdr);
  uint64_t n = (uint64_t)rd_encoded(&r, count_enc, hdr);
  if (r.bad || n == 0) return NULL;
  const uint8_t *tab = r.p;
  int64_t rel = (int64_t)pc - (int64_t)hdr;
  if (rel < INT32_MIN || rel > INT32_MAX) return NULL;
  size_t lo = 0, hi_ = (size_t)n;
  /* first entry with initial location > pc */
  while (lo < hi_) {
    size_t mid = lo + (hi_ - lo) / 2;
    int32_t loc;
    memcpy(&loc, tab + mid * 8, 4);
    if ((int64_t)loc <= rel)
      lo = mid + 1;
    else
      hi_ = mid;
  }
  if (lo == 0) return NULL;
  int32_t fde;
  memcpy(&fde, tab + (lo - 1) * 8 + 4, 4);
  return (const uint8_t *)(hdr + (uintptr_t)(intptr_t)fde);
}

void etr__cfi_find(uintptr_t eh_frame_hdr, uintptr_t pc, etr__cfi_rule *out) {
  out->kind = ETR__CFI_NOFDE;
  out->cfa_rbp = false;
  out->cfa_off = 0;
  out->rbp_off = 0;
  if (!eh_frame_hdr) return;
  const uint8_t *f = find_fde(eh_frame_hdr, pc);
  if (!f) return;
  const uint8_t *fend;
  const uint8_t *p = entry_bounds(f, &fend);
  if (!p) return;
  uint32_t cie_off;
  memcpy(&cie_off, p, 4);
  if (cie_off == 0) return; /* a CIE, not an FDE */
  cie ci;
  if (!parse_cie(p - cie_off, &ci)) return;
  rd r = {p + 4, fend, false};
  uintptr_t begin = rd_encoded(&r, ci.fde_enc, 0);
  uintptr_t range = rd_encoded(&r, ci.fde_enc & 0x0f, 0);
  if (r.bad || pc < begin || pc - begin >= range) return;
  if (ci.has_z) {
    uint64_t n = rd_uleb(&r);
    if (r.bad || n > (uint64_t)(r.end - r.p)) return;
    r.p += n;
  }
  if (ci.signal) {
    out->kind = ETR__CFI_SIGNAL;
    return;
  }
  out->kind = ETR__CFI_COMPLEX;
  row rw = {-1, 0, {R_SAME, 0}, {R_SAME, 0}};
  if (!run_cfa(ci.insns, ci.insns_end, &ci, begin, UINTPTR_MAX, &rw, NULL)) return;
  row init = rw;
  if (!run_cfa(r.p, fend, &ci, begin, pc, &rw, &init)) return;

  if (rw.ra.kind == R_UNDEF) {
    out->kind = ETR__CFI_END;
    return;
  }
  if (rw.cfa_reg != REG_RSP_ && rw.cfa_reg != REG_RBP_) return;
  if (rw.ra.kind != R_OFFSET || rw.ra.off != -8) return;
  if (rw.rbp.kind == R_OTHER) return;
  out->kind = ETR__CFI_SIMPLE;
  out->cfa_rbp = rw.cfa_reg == REG_RBP_;
  out->cfa_off = rw.cfa_off;
  out->rbp_off = rw.rbp.kind == R_OFFSET ? rw.rbp.off : 0;
}

#else /* not x86_64: the walker is not used; every frame goes to libunwind */

void etr__cfi_find(uintptr_t eh_frame_hdr, uintptr_t pc, etr__cfi_rule *out) {
  (void)eh_frame_hdr;
  (void)pc;
  out->kind = ETR__CFI_COMPLEX;
  out->cfa_rbp = false;
  out->cfa_off = 0;
  out->rbp_off = 0;
}

#endif
