/* The recording clock (src/observer/clock.h): its adjustment keeps the mapping continuous,
 * steers it back to CLOCK_MONOTONIC over the horizon and never goes back; live, once the
 * counter is calibrated, its readings lie between CLOCK_MONOTONIC readings taken around
 * them (within the calibration's error) and never decrease on a thread. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <time.h>

#include "observer/clock.h"

#define RATE ((uint64_t)(0.4 * 4294967296.0)) /* 0.4 ns per tick */
#define H 1000000000LL

static int64_t at(uint64_t tsc, uint64_t t0, int64_t n0, uint64_t mult) {
  return etr__clock_apply(tsc, t0, n0, mult);
}

static void test_adjust_continuous_and_converges(void **state) {
  (void)state;
  /* an old mapping running 20 ppm fast, anchored 10^10 ticks (4 s) before the reading */
  uint64_t old_t0 = 1000000000000ull, old_mult = RATE + RATE / 50000;
  int64_t old_n0 = 5000000000000LL;
  uint64_t tsc = old_t0 + 10000000000ull;
  int64_t truth = old_n0 + 4000000000LL; /* what CLOCK_MONOTONIC says at tsc */
  int64_t mapped = at(tsc, old_t0, old_n0, old_mult);
  assert_true(mapped > truth); /* the old mapping is ahead by 80 µs */
  uint64_t t0, mult;
  int64_t n0;
  etr__clock_adjust(old_t0, old_n0, old_mult, tsc, truth, RATE, H, &t0, &n0, &mult);
  assert_int_equal(at(tsc, t0, n0, mult), mapped); /* continuous: no step */
  assert_true(mult > 0 && mult < RATE);            /* slower, to let true time catch up */
  uint64_t later = tsc + (uint64_t)(H / 0.4);
  int64_t want = truth + H, got = at(later, t0, n0, mult);
  assert_true(got - want < 1000 && want - got < 1000); /* met within 1 µs after 1 s */
  /* behind instead: faster, still continuous */
  etr__clock_adjust(old_t0, old_n0 - 200000, RATE, tsc, truth, RATE, H, &t0, &n0, &mult);
  assert_int_equal(at(tsc, t0, n0, mult), at(tsc, old_t0, old_n0 - 200000, RATE));
  assert_true(mult > RATE);
  got = at(later, t0, n0, mult);
  assert_true(got - want < 1000 && want - got < 1000);
}

static void test_adjust_jumps_but_never_back(void **state) {
  (void)state;
  uint64_t t0, mult;
  int64_t n0;
  /* the clock is 2 s ahead of the mapping (the counter stopped, say): take it at once */
  etr__clock_adjust(0, 0, RATE, 1000, 2 * H, RATE, H, &t0, &n0, &mult);
  assert_int_equal(n0, 2 * H);
  assert_int_equal(t0, 1000);
  /* 2 s behind: keep the mapping's value (never back), at the long-term rate */
  int64_t mapped = at(5000000000ull, 0, 3 * H, RATE);
  etr__clock_adjust(0, 3 * H, RATE, 5000000000ull, H, RATE, H, &t0, &n0, &mult);
  assert_int_equal(n0, mapped);
  assert_int_equal(mult, RATE);
}

static void test_apply_before_origin(void **state) {
  (void)state;
  /* a counter value before the mapping's origin (another CPU's reading a little behind) */
  assert_int_equal(at(900, 1000, 5000, (uint64_t)1 << 32), 4900);
  assert_int_equal(at(1100, 1000, 5000, (uint64_t)1 << 32), 5100);
  /* a huge distance does not overflow (128-bit product) */
  int64_t far = at(1000 + 1000000000000000ull, 1000, 0, RATE);
  assert_true(far > 399999999000000LL && far < 400000001000000LL);
}

static void test_live(void **state) {
  (void)state;
  etr__clock_start();
  for (int i = 0; i < 2000 && !etr__clock_uses_tsc(); i++) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
    etr__clock_tick();
  }
  if (!etr__clock_uses_tsc()) {
    printf("(the kernel does not keep time with the TSC here: clock_gettime is used)\n");
    skip();
  }
  int64_t prev = INT64_MIN;
  for (int i = 0; i < 200000; i++) {
    int64_t a = etr__clock_mono_ns();
    int64_t b = etr__clock_now();
    int64_t c = etr__clock_mono_ns();
    /* within 200 µs of the readings around it: a wrong scale or origin is off by far more
     * within the run, the calibration's own error (a few ppm) by far less */
    if (b < a - 200000 || b > c + 200000)
      fail_msg("reading %d: %lld not within [%lld, %lld] +- 200 us", i, (long long)b, (long long)a,
               (long long)c);
    if (b < prev)
      fail_msg("reading %d went back: %lld after %lld", i, (long long)b, (long long)prev);
    prev = b;
    if (i % 1000 == 0) etr__clock_tick();
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adjust_continuous_and_converges),
      cmocka_unit_test(test_adjust_jumps_but_never_back),
      cmocka_unit_test(test_apply_before_origin),
      cmocka_unit_test(test_live),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
