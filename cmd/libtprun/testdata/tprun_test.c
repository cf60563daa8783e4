// tprun_test: a rank program that exercises libtprun through tprun.h alone,
// on the host backend. Run under the launcher:
//
//	tprun --tp 2 -- ./tprun_test SEED
//
// Every rank draws the same inputs from SEED (fresh per step), steps two
// ops of different shapes, one of them also with per-step weights of
// several "layers" interleaved with its own, and checks every element of
// every block against a float64 reference computed here, then all-gathers
// a hash of the block and checks that every rank holds the same bytes. It
// checks tprun_pack_weight against the packed layout written out here from
// kernel/skinny.h's description, on fresh random weights. It also checks the
// interface's contract: status codes, the per-thread last error, handles
// used wrongly, a second call while a step runs. It prints one line per
// failed check and "rank R: ok ..." at the end, and exits 1 on any failure.

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tprun.h"

static int rank = -1, size = -1;
static int failures;

#define CHECK(cond, ...)                                                  \
	do {                                                              \
		if (!(cond)) {                                            \
			failures++;                                       \
			fprintf(stderr, "rank %d: %s:%d: check failed: ", \
				rank, __FILE__, __LINE__);                \
			fprintf(stderr, __VA_ARGS__);                     \
			fprintf(stderr, "\n");                            \
		}                                                         \
	} while (0)

// MUST is CHECK for calls the rest of the program needs.
#define MUST(call)                                                                           \
	do {                                                                                 \
		int st_ = (call);                                                            \
		if (st_ != TPRUN_OK) {                                                       \
			fprintf(stderr, "rank %d: %s:%d: %s: %s (%s)\n", rank, __FILE__,     \
				__LINE__, #call, tprun_status_name(st_), tprun_last_error()); \
			exit(1);                                                             \
		}                                                                            \
	} while (0)

// ---- random inputs, the same on every rank -------------------------------

static uint64_t rng_state;

static uint64_t next_u64(void) {  // splitmix64
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static double uniform(void) { return ((double)(next_u64() >> 11) + 0.5) * 0x1p-53; }

static double normal(void) {  // Box-Muller
	return sqrt(-2.0 * log(uniform())) * cos(2.0 * M_PI * uniform());
}

// bf16_round rounds x to the nearest bf16, ties to even, in one rounding.
static uint16_t bf16_round(double x) {
	if (isnan(x)) {
		return 0x7FC0;
	}
	uint16_t sign = signbit(x) ? 0x8000 : 0;
	double a = fabs(x);
	if (isinf(a)) {
		return sign | 0x7F80;
	}
	if (a == 0) {
		return sign;
	}
	int e;
	frexp(a, &e);      // a = f * 2^e, f in [0.5, 1): floor(log2 a) = e-1
	int q = e - 1 - 7;  // the quantum of an 8-bit significand
	if (q < -133) {
		q = -133;  // bf16's subnormal quantum
	}
	double n = nearbyint(ldexp(a, -q));  // exact scaling, then ties to even
	if (n == 0) {
		return sign;
	}
	if (n >= 256) {
		n /= 2;
		q++;
	}
	if (n < 128) {
		return sign | (uint16_t)n;  // subnormal
	}
	int field = q + 134;
	if (field >= 255) {
		return sign | 0x7F80;
	}
	return sign | (uint16_t)(field << 7 | ((int)n - 128));
}

static double bf16_value(uint16_t b) {
	uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

// fill draws bf16(scale * N(0,1)), never zero: results must not hinge on
// zeros.
static void fill(uint16_t *dst, size_t n, double scale) {
	for (size_t i = 0; i < n; i++) {
		uint16_t v = bf16_round(scale * normal());
		if ((v & 0x7FFF) == 0) {
			v |= bf16_round(scale);
		}
		dst[i] = v;
	}
}

// ---- the reference ---------------------------------------------------------

// chain is the op's epilogue applied to an accumulated sum s: round s to
// bf16, add shared in fp32, round to bf16, store -0 as +0.
static uint16_t chain(double s, uint16_t shared) {
	float t = (float)bf16_value(bf16_round(s)) + (float)bf16_value(shared);
	uint16_t v = bf16_round(t);
	return v == 0x8000 ? 0 : v;
}

// check_block compares the whole [m, hidden] block with the reference. The
// op accumulates in fp32 in an order of its choosing, so its sum lies
// within e = gamma_K*sum|l*w| + K*2^-149 of the exact one (Higham, Thm
// 4.4); the float64 sum here adds at most K*2^-52*sum|l*w|. The epilogue is
// monotone in the sum, so a correct element lies between chain(S-e) and
// chain(S+e): a bound of the roundings only, not a tolerance.
static long check_block(const char *what, int m, int hidden, int latent, const uint16_t *lat,
			const uint16_t *weight, const uint16_t *shared, const uint16_t *out) {
	long wrong = 0;
	double k = latent, gamma = k * 0x1p-24 / (1 - k * 0x1p-24);
	for (int i = 0; i < m; i++) {
		for (int n = 0; n < hidden; n++) {
			double s = 0, abs = 0;
			for (int j = 0; j < latent; j++) {
				double p = bf16_value(lat[i * latent + j]) * bf16_value(weight[(size_t)n * latent + j]);
				s += p;
				abs += fabs(p);
			}
			double e = (gamma + k * 0x1p-52) * abs + k * 0x1p-149;
			uint16_t sh = shared[i * hidden + n], got = out[i * hidden + n];
			double lo = bf16_value(chain(s - e, sh)), hi = bf16_value(chain(s + e, sh));
			double g = bf16_value(got);
			if (got == 0x8000 || isnan(g) || g < lo || g > hi) {
				if (wrong++ == 0) {
					fprintf(stderr,
						"rank %d: %s: m=%d out[%d,%d] = %g (0x%04x), want [%g, %g] (S = %g, shared %g)\n",
						rank, what, m, i, n, g, got, lo, hi, s, bf16_value(sh));
				}
			}
		}
	}
	return wrong;
}

static uint64_t fnv1a(const void *p, size_t n) {
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h = (h ^ b[i]) * 0x100000001b3ull;
	}
	return h;
}

// ---- one op under test -----------------------------------------------------

#define LAYERS 3

struct shape {
	int hidden, latent, max_m, shard;
	uint16_t *weight;  // the full [hidden, latent] weight, the same on every rank
	// Full weights of other "layers", passed with the step
	// (tprun_op_step_host_weight) instead of the op's own; NULL when unused.
	uint16_t *layer[LAYERS];
	tprun_op *op;
};

static long steps, elements, wrong, differ;

static void new_weight(struct shape *s) {
	fill(s->weight, (size_t)s->hidden * s->latent, 1.0 / sqrt(s->latent));
	MUST(tprun_op_set_weight_host(s->op, s->weight + (size_t)rank * s->shard * s->latent,
				      (size_t)s->shard * s->latent));
}

// The weight a step uses (step's which): the op's own through
// tprun_op_step_host, the op's own through tprun_op_step_host_weight with
// NULL, or layer k >= 0 passed with the step.
enum { OWN = -1, OWN_NULL = -2 };

static void new_layers(struct shape *s) {
	for (int k = 0; k < LAYERS; k++) {
		if (s->layer[k] == NULL) {
			s->layer[k] = malloc(sizeof *s->layer[k] * s->hidden * s->latent);
		}
		fill(s->layer[k], (size_t)s->hidden * s->latent, 1.0 / sqrt(s->latent));
	}
}

// step runs one step with fresh inputs and checks the block and that every
// rank holds the same one. packed passes this rank's shared slice packed
// (stride shard) instead of a view into the full residual (stride hidden);
// which picks the weight (OWN, OWN_NULL or a layer).
static void step(tprun_group *g, struct shape *s, int m, int packed, int which, const char *what) {
	uint16_t *lat = malloc(sizeof *lat * m * s->latent);
	uint16_t *shared = malloc(sizeof *shared * m * s->hidden);
	uint16_t *mine = malloc(sizeof *mine * m * s->shard);
	uint16_t *out = malloc(sizeof *out * m * s->hidden);
	fill(lat, (size_t)m * s->latent, 1.0);
	fill(shared, (size_t)m * s->hidden, 1.0);
	for (int i = 0; i < m * s->hidden; i++) {
		out[i] = 0xFFFF;  // a NaN: whatever the op leaves unwritten fails
	}
	const uint16_t *sh = shared + rank * s->shard;
	size_t stride = s->hidden;
	if (packed) {
		for (int i = 0; i < m; i++) {
			memcpy(mine + i * s->shard, shared + i * s->hidden + rank * s->shard, sizeof *mine * s->shard);
		}
		sh = mine;
		stride = s->shard;
	}
	const uint16_t *weight = s->weight;
	if (which == OWN) {
		MUST(tprun_op_step_host(s->op, m, lat, sh, stride, out));
	} else if (which == OWN_NULL) {
		MUST(tprun_op_step_host_weight(s->op, m, lat, NULL, sh, stride, out));
	} else {
		weight = s->layer[which];
		MUST(tprun_op_step_host_weight(s->op, m, lat, weight + (size_t)rank * s->shard * s->latent, sh, stride, out));
	}
	steps++;
	elements += (long)m * s->hidden;
	wrong += check_block(what, m, s->hidden, s->latent, lat, weight, shared, out);
	uint64_t h = fnv1a(out, sizeof *out * m * s->hidden);
	uint64_t *all = malloc(sizeof *all * size);
	MUST(tprun_group_allgather(g, &h, sizeof h, all));
	for (int r = 0; r < size; r++) {
		if (all[r] != h) {
			differ++;
			fprintf(stderr, "rank %d: %s: m=%d: rank %d's block differs from this rank's\n", rank, what, m, r);
		}
	}
	free(all);
	free(lat);
	free(shared);
	free(mine);
	free(out);
}

// ---- the packed weight layout ----------------------------------------------

// pack_reference writes the packed form of w, row-major [shard, latent], into
// dst, walking the packed buffer as kernel/skinny.h describes it: block (g, c)
// of 512 elements at (g*C + c)*512; within it element (q*32 + l)*8 + e holds
// w[16g + l/4 + 8(a%2)][32c + 8(l%4) + 4q + 2(a/2) + e%2], a = e/2; rows past
// shard and k past latent are zeros.
static void pack_reference(uint16_t *dst, const uint16_t *w, int shard, int latent) {
	int G = (shard + 15) / 16, C = (latent + 31) / 32;
	for (int g = 0; g < G; g++) {
		for (int c = 0; c < C; c++) {
			uint16_t *blk = dst + ((size_t)g * C + c) * 512;
			for (int q = 0; q < 2; q++) {
				for (int l = 0; l < 32; l++) {
					for (int e = 0; e < 8; e++) {
						int a = e / 2;
						int n = 16 * g + l / 4 + 8 * (a % 2);
						int k = 32 * c + 8 * (l % 4) + 4 * q + 2 * (a / 2) + e % 2;
						blk[(q * 32 + l) * 8 + e] = n < shard && k < latent ? w[(size_t)n * latent + k] : 0;
					}
				}
			}
		}
	}
}

static long packed_checked;

static void check_packing(void) {
	static const int shapes[][2] = {{24, 40}, {8, 8}, {40, 72}, {16, 32}, {896, 3584}};
	for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
		int shard = shapes[i][0], latent = shapes[i][1];
		size_t n = 0, want = (size_t)((shard + 15) / 16) * ((latent + 31) / 32) * 512;
		int st = tprun_packed_weight_len(shard, latent, &n);
		CHECK(st == TPRUN_OK && n == want, "packed_weight_len(%d, %d): %s, %zu, want %zu", shard, latent,
		      tprun_status_name(st), n, want);
		if (st != TPRUN_OK || n != want) {
			continue;
		}
		uint16_t *w = malloc(sizeof *w * shard * latent), *got = malloc(sizeof *got * n), *ref = malloc(sizeof *ref * n);
		fill(w, (size_t)shard * latent, 1.0);
		for (size_t j = 0; j < n; j++) {
			got[j] = 0xFFFF;  // a NaN: an element left unwritten fails
		}
		pack_reference(ref, w, shard, latent);
		st = tprun_pack_weight(got, w, shard, latent);
		CHECK(st == TPRUN_OK, "pack_weight(%d, %d): %s \"%s\"", shard, latent, tprun_status_name(st), tprun_last_error());
		size_t bad = 0, first = 0;
		for (size_t j = 0; j < n; j++) {
			if (got[j] != ref[j] && bad++ == 0) {
				first = j;
			}
		}
		CHECK(bad == 0, "pack_weight(%d, %d): %zu of %zu elements differ from the layout, first [%zu] = 0x%04x, want 0x%04x",
		      shard, latent, bad, n, first, got[first], ref[first]);
		packed_checked += (long)n;
		free(w);
		free(got);
		free(ref);
	}
	// Shapes the op's rules refuse, each naming the value.
	static const struct {
		int shard, latent;
		const char *named;
	} bad[] = {{0, 8, "shard = 0"},  {12, 8, "shard = 12"}, {-8, 8, "shard = -8"},
		   {8, 0, "latent = 0"}, {8, 12, "latent = 12"}, {8, 1048576 + 8, "latent = 1048584"}};
	static uint16_t buf[64];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		size_t n = 12345;
		int st = tprun_packed_weight_len(bad[i].shard, bad[i].latent, &n);
		CHECK(st == TPRUN_EINVAL && n == 12345 && strstr(tprun_last_error(), bad[i].named) != NULL,
		      "packed_weight_len(%d, %d): %s \"%s\"", bad[i].shard, bad[i].latent, tprun_status_name(st), tprun_last_error());
		st = tprun_pack_weight(buf, buf + 32, bad[i].shard, bad[i].latent);
		CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), bad[i].named) != NULL, "pack_weight(%d, %d): %s \"%s\"",
		      bad[i].shard, bad[i].latent, tprun_status_name(st), tprun_last_error());
	}
	int st = tprun_packed_weight_len(8, 8, NULL);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "NULL") != NULL, "packed_weight_len NULL: %s", tprun_status_name(st));
	st = tprun_pack_weight(NULL, buf, 8, 8);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "dst is NULL") != NULL, "pack_weight dst NULL: %s \"%s\"",
	      tprun_status_name(st), tprun_last_error());
	static uint16_t big[1024];
	st = tprun_pack_weight(big + 8, big, 8, 8);  // 64 elements in, 512 out: they overlap
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "overlaps") != NULL, "pack_weight overlapping: %s \"%s\"",
	      tprun_status_name(st), tprun_last_error());
}

// check_mailbox_bytes holds tprun_mailbox_bytes to the layout the header
// writes out, counted here row by row, on random shapes, and to its refusals.
static void check_mailbox_bytes(void) {
	for (int i = 0; i < 100; i++) {
		int hidden = 8 * (1 + (int)(next_u64() % 2048)), max_m = 1 + (int)(next_u64() % 128);
		size_t rows = 0;
		for (int m = 1; m <= max_m && m <= 8; m++) {
			rows += (size_t)m;
		}
		if (max_m > 8) {
			rows += (size_t)max_m;
		}
		size_t want = 3 * ((rows * (size_t)hidden * 2 + 63) / 64 * 64), n = 0;
		int st = tprun_mailbox_bytes(hidden, max_m, &n);
		CHECK(st == TPRUN_OK && n == want, "mailbox_bytes(%d, %d): %s, %zu, want %zu", hidden, max_m,
		      tprun_status_name(st), n, want);
	}
	static const struct {
		int hidden, max_m;
		const char *named;
	} bad[] = {{7172, 4, "hidden"}, {0, 4, "hidden"}, {7168, 0, "maxM"}, {7168, 129, "maxM"}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		size_t n = 12345;
		int st = tprun_mailbox_bytes(bad[i].hidden, bad[i].max_m, &n);
		CHECK(st == TPRUN_EINVAL && n == 12345 && strstr(tprun_last_error(), bad[i].named) != NULL,
		      "mailbox_bytes(%d, %d): %s \"%s\"", bad[i].hidden, bad[i].max_m, tprun_status_name(st), tprun_last_error());
	}
	int st = tprun_mailbox_bytes(8, 1, NULL);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "NULL") != NULL, "mailbox_bytes NULL: %s", tprun_status_name(st));
}

// ---- the contract ----------------------------------------------------------

static void *fresh_thread(void *arg) {
	(void)arg;
	// A thread that never failed has no last error, whatever others did.
	CHECK(strcmp(tprun_last_error(), "") == 0, "fresh thread's last error is \"%s\"", tprun_last_error());
	CHECK(tprun_last_error_rank() == -1, "fresh thread's last error rank");
	// Its own failure is its own.
	int st = tprun_group_rank((const tprun_group *)(uintptr_t)987654321);
	CHECK(st == TPRUN_EINVAL, "never-issued handle: %s", tprun_status_name(st));
	CHECK(strstr(tprun_last_error(), "never issued") != NULL, "never-issued handle: \"%s\"", tprun_last_error());
	return NULL;
}

struct busy_arg {
	struct shape *s;
	uint16_t *lat, *shared, *out;
	int status;
	atomic_int *done;
};

static void *busy_step(void *p) {
	struct busy_arg *a = p;
	a->status = tprun_op_step_host(a->s->op, 1, a->lat, a->shared, a->s->shard, a->out);
	atomic_fetch_add(a->done, 1);
	return NULL;
}

// check_busy: two threads of rank 0 step the same op at once. The peers
// step only after a barrier that rank 0 enters once one of its calls has
// failed with TPRUN_EBUSY, so the other one is still waiting for them then.
static void check_busy(tprun_group *g, struct shape *s) {
	uint16_t *lat = calloc(s->latent, sizeof *lat), *shared = calloc(s->shard, sizeof *shared);
	uint16_t *out0 = calloc(s->hidden, sizeof *out0), *out1 = calloc(s->hidden, sizeof *out1);
	fill(lat, s->latent, 1.0);
	fill(shared, s->shard, 1.0);
	if (rank != 0) {
		MUST(tprun_group_barrier(g));
		MUST(tprun_op_step_host(s->op, 1, lat, shared, s->shard, out0));
	} else {
		atomic_int done = 0;
		struct busy_arg a[2] = {{s, lat, shared, out0, 0, &done}, {s, lat, shared, out1, 0, &done}};
		pthread_t t[2];
		pthread_create(&t[0], NULL, busy_step, &a[0]);
		pthread_create(&t[1], NULL, busy_step, &a[1]);
		while (atomic_load(&done) == 0) {
			nanosleep(&(struct timespec){0, 1000000}, NULL);
		}
		MUST(tprun_group_barrier(g));
		pthread_join(t[0], NULL);
		pthread_join(t[1], NULL);
		int busy = (a[0].status == TPRUN_EBUSY) + (a[1].status == TPRUN_EBUSY);
		int ok = (a[0].status == TPRUN_OK) + (a[1].status == TPRUN_OK);
		CHECK(busy == 1 && ok == 1, "concurrent steps: %s and %s, want one TPRUN_OK and one TPRUN_EBUSY",
		      tprun_status_name(a[0].status), tprun_status_name(a[1].status));
	}
	steps++;
	free(lat);
	free(shared);
	free(out0);
	free(out1);
}

static void check_contract(tprun_group *g, struct shape *s) {
	CHECK(tprun_abi_version() == TPRUN_ABI_VERSION, "abi version %d", tprun_abi_version());
	CHECK(tprun_version() != NULL && strstr(tprun_version(), "tprun") != NULL, "version \"%s\"", tprun_version());
	CHECK(strcmp(tprun_status_name(TPRUN_ETIMEOUT), "TPRUN_ETIMEOUT") == 0, "status name");

	int st = tprun_join(NULL);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "NULL") != NULL, "join(NULL): %s \"%s\"",
	      tprun_status_name(st), tprun_last_error());
	char main_err[512];
	snprintf(main_err, sizeof main_err, "%s", tprun_last_error());
	pthread_t t;
	pthread_create(&t, NULL, fresh_thread, NULL);
	pthread_join(t, NULL);
	CHECK(strcmp(tprun_last_error(), main_err) == 0, "another thread's failure changed this thread's last error to \"%s\"",
	      tprun_last_error());

	// A handle of the wrong kind, and a device that is none.
	st = tprun_op_check((tprun_op *)g);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "group handle") != NULL, "group as op: %s \"%s\"",
	      tprun_status_name(st), tprun_last_error());
	tprun_op *bad = NULL;
	st = tprun_op_create(g, s->hidden, s->latent, s->max_m, -7, &bad);
	CHECK(st == TPRUN_EINVAL && bad == NULL && strstr(tprun_last_error(), "device = -7") != NULL,
	      "device -7: %s \"%s\"", tprun_status_name(st), tprun_last_error());
	st = tprun_op_create_ex(g, s->hidden, s->latent, s->max_m, TPRUN_DEVICE_GROUP, 0, "carrier pigeon", &bad);
	CHECK(st == TPRUN_EINVAL && bad == NULL && strstr(tprun_last_error(), "carrier pigeon") != NULL,
	      "backend \"carrier pigeon\": %s \"%s\"", tprun_status_name(st), tprun_last_error());
	st = tprun_op_create_ex(g, s->hidden, s->latent, s->max_m, TPRUN_DEVICE_GROUP, -1, NULL, &bad);
	CHECK(st == TPRUN_EINVAL && bad == NULL && strstr(tprun_last_error(), "deadline_seconds = -1") != NULL,
	      "deadline -1: %s \"%s\"", tprun_status_name(st), tprun_last_error());
	// A shape every rank gets wrong fails on every rank, and the group
	// goes on.
	st = tprun_op_create(g, s->hidden + 1, s->latent, s->max_m, TPRUN_DEVICE_HOST, &bad);
	CHECK(st == TPRUN_EINVAL && bad == NULL && strstr(tprun_last_error(), "hidden") != NULL,
	      "hidden %d: %s \"%s\"", s->hidden + 1, tprun_status_name(st), tprun_last_error());

	const char *b = tprun_op_backend(s->op), *why = tprun_op_backend_reason(s->op);
	CHECK(b != NULL && strcmp(b, "host") == 0, "backend \"%s\"", b ? b : "(null)");
	CHECK(why != NULL && strstr(why, "TPRUN_DEVICE_HOST") != NULL, "backend reason \"%s\": want the host device named", why ? why : "(null)");

	static uint16_t w[8], buf[1 << 14];  // larger than any operand here
	st = tprun_op_set_weight_host(s->op, w, 8);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "count = 8") != NULL, "weight count 8: %s \"%s\"",
	      tprun_status_name(st), tprun_last_error());
	for (int m = 0; m <= s->max_m + 1; m += s->max_m + 1) {
		st = tprun_op_step_host(s->op, m, buf, buf, s->shard, buf);
		CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "m = ") != NULL, "m = %d: %s \"%s\"", m,
		      tprun_status_name(st), tprun_last_error());
	}
	// No weight given yet: refused before anything is sent.
	st = tprun_op_step_host(s->op, 1, buf, buf, s->shard, buf);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "no weight") != NULL, "step before the weight: %s \"%s\"",
	      tprun_status_name(st), tprun_last_error());
	st = tprun_op_step_host(s->op, 1, NULL, buf, s->shard, buf);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "latent is NULL") != NULL, "latent NULL: %s \"%s\"",
	      tprun_status_name(st), tprun_last_error());
	st = tprun_op_step(s->op, 1, buf, buf, s->shard, buf, NULL);
	CHECK(st == TPRUN_EUNAVAILABLE, "device step on the host backend: %s \"%s\"", tprun_status_name(st),
	      tprun_last_error());
	st = tprun_op_set_weight_device(s->op, buf);
	CHECK(st == TPRUN_EUNAVAILABLE, "device weight on the host backend: %s \"%s\"", tprun_status_name(st),
	      tprun_last_error());
	st = tprun_op_step_weight(s->op, 1, buf, buf + 4096, buf, s->shard, buf + 8192, NULL);
	CHECK(st == TPRUN_EUNAVAILABLE, "device step with a weight on the host backend: %s \"%s\"", tprun_status_name(st),
	      tprun_last_error());
	// A device weight that is not 16-byte aligned, a host one that is not
	// 2-byte aligned: refused, naming the weight, before anything runs.
	st = tprun_op_step_weight(s->op, 1, buf, (const char *)(buf + 4096) + 8, buf, s->shard, buf + 8192, NULL);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "weight = ") != NULL && strstr(tprun_last_error(), "16-byte") != NULL,
	      "misaligned device weight: %s \"%s\"", tprun_status_name(st), tprun_last_error());
	st = tprun_op_step_host_weight(s->op, 1, buf, (const uint16_t *)((const char *)(buf + 4096) + 1), buf, s->shard, buf + 8192);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "weight = ") != NULL && strstr(tprun_last_error(), "2-byte") != NULL,
	      "misaligned host weight: %s \"%s\"", tprun_status_name(st), tprun_last_error());
	st = tprun_op_step_host_weight(s->op, s->max_m + 1, buf, buf, buf, s->shard, buf);
	CHECK(st == TPRUN_EINVAL && strstr(tprun_last_error(), "tprun_op_step_host_weight: ") != NULL &&
	      strstr(tprun_last_error(), "m = ") != NULL, "host step with a weight, m too large: %s \"%s\"",
	      tprun_status_name(st), tprun_last_error());
	CHECK(tprun_op_check(s->op) == TPRUN_OK, "check: %s", tprun_last_error());
	CHECK(tprun_op_close(NULL) == TPRUN_OK && tprun_group_close(NULL) == TPRUN_OK, "closing NULL");
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: tprun --tp N -- %s SEED\n", argv[0]);
		return 2;
	}
	uint64_t seed = strtoull(argv[1], NULL, 0);
	tprun_group *g = NULL;
	MUST(tprun_join(&g));
	rank = tprun_group_rank(g);
	size = tprun_group_size(g);
	CHECK(rank >= 0 && rank < size, "rank %d of %d", rank, size);
	CHECK(tprun_group_local_rank(g) == rank, "local rank %d", tprun_group_local_rank(g));
	rng_state = seed;

	struct shape a = {.hidden = 24 * size, .latent = 72, .max_m = 8, .shard = 24};
	struct shape b = {.hidden = 8 * size, .latent = 8, .max_m = 3, .shard = 8};
	MUST(tprun_op_create(g, a.hidden, a.latent, a.max_m, TPRUN_DEVICE_HOST, &a.op));
	MUST(tprun_op_create_ex(g, b.hidden, b.latent, b.max_m, TPRUN_DEVICE_GROUP, 30.0, "host", &b.op));
	a.weight = malloc(sizeof *a.weight * a.hidden * a.latent);
	b.weight = malloc(sizeof *b.weight * b.hidden * b.latent);

	check_packing();
	check_mailbox_bytes();
	check_contract(g, &a);
	// A weight passed with the step needs none of the op's own.
	new_layers(&a);
	step(g, &a, 2, 0, 0, "op a, layer 0, before its own weight");
	new_weight(&a);
	new_weight(&b);
	for (int round = 0; round < 3; round++) {
		for (int m = 1; m <= a.max_m; m++) {
			// Op a's steps cycle through its own weight (both calls) and
			// the layers' weights passed with the step.
			int which = (m + round) % (LAYERS + 2) - 2;
			char what[64];
			snprintf(what, sizeof what, "op a, weight %d", which);
			step(g, &a, m, (m + round) % 2, which, what);
			step(g, &b, 1 + (m + round) % b.max_m, round == 1, OWN, "op b");
		}
		new_weight(&a);  // a fresh weight between steps
		new_layers(&a);
	}
	if (size > 1) {
		check_busy(g, &a);
	}
	step(g, &a, a.max_m, 0, OWN, "op a after the concurrent steps");
	step(g, &a, a.max_m, 1, LAYERS - 1, "op a, last layer, after the concurrent steps");

	MUST(tprun_op_close(a.op));
	int st = tprun_op_check(a.op);
	CHECK(st == TPRUN_ECLOSED, "check after close: %s", tprun_status_name(st));
	st = tprun_op_close(a.op);
	CHECK(st == TPRUN_ECLOSED, "second close: %s", tprun_status_name(st));
	// Closing the group closes b.
	MUST(tprun_group_close(g));
	st = tprun_op_check(b.op);
	CHECK(st == TPRUN_ECLOSED, "op after its group's close: %s \"%s\"", tprun_status_name(st), tprun_last_error());
	st = tprun_group_barrier(g);
	CHECK(st == TPRUN_ECLOSED, "group after close: %s", tprun_status_name(st));

	CHECK(wrong == 0, "%ld of %ld elements wrong", wrong, elements);
	CHECK(differ == 0, "%ld blocks differ between ranks", differ);
	if (failures > 0) {
		fprintf(stderr, "rank %d: FAIL: %d checks failed\n", rank, failures);
		return 1;
	}
	printf("rank %d: ok: %ld steps, %ld elements checked, 0 wrong, every block identical on all %d ranks; "
	       "%ld packed weight elements as the layout says (seed %#llx)\n",
	       rank, steps, elements, size, packed_checked, (unsigned long long)seed);
	return 0;
}
