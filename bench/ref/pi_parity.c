/* Closed-loop driver for linuxptp's own servo.c + pi.c, compiled at run
 * time against an unmodified linuxptp source tree (bench/clock-servo.sh);
 * the C twin of clocksync::harness::parity_loop (examples/pi_parity.rs).
 * Only the glue is here: configuration lookups answer with linuxptp's
 * defaults or the command line, logging is silenced, and the servos this
 * comparison does not use are not built.
 *
 * Plant (same in the Rust twin): phase = dst - src (ns, double);
 * per interval phase += (drift_ppb + applied_ppb) * interval_s;
 * measured offset = llround(phase) + noise (integer LCG);
 * JUMP: phase -= offset; JUMP/LOCKED*: applied = -ppb (as phc2sys).
 * Output per update: "k offset state ppb | " and phc2sys's -m line.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "servo.h"

/* ---- stubs ---- */
static double c_kp = 0.7, c_ki = 0.3, c_step = 0.0, c_first = 0.00002;
static int c_maxfreq = 900000000, c_offthr = 0, c_numoff = 10;

double config_get_double(struct config *cfg, const char *section, const char *option)
{
	if (!strcmp(option, "pi_proportional_const")) return c_kp;
	if (!strcmp(option, "pi_integral_const")) return c_ki;
	if (!strcmp(option, "pi_proportional_scale")) return 0.0;
	if (!strcmp(option, "pi_integral_scale")) return 0.0;
	if (!strcmp(option, "pi_proportional_exponent")) return -0.3;
	if (!strcmp(option, "pi_integral_exponent")) return 0.4;
	if (!strcmp(option, "pi_proportional_norm_max")) return 0.7;
	if (!strcmp(option, "pi_integral_norm_max")) return 0.3;
	if (!strcmp(option, "step_threshold")) return c_step;
	if (!strcmp(option, "first_step_threshold")) return c_first;
	fprintf(stderr, "unknown double option %s\n", option);
	exit(2);
}

int config_get_int(struct config *cfg, const char *section, const char *option)
{
	if (!strcmp(option, "max_frequency")) return c_maxfreq;
	if (!strcmp(option, "servo_offset_threshold")) return c_offthr;
	if (!strcmp(option, "servo_num_offset_values")) return c_numoff;
	fprintf(stderr, "unknown int option %s\n", option);
	exit(2);
}

int print_level = 0;
void print(int level, char const *format, ...) { (void)level; (void)format; }
struct servo *linreg_servo_create(double fadj) { return NULL; }
struct servo *ntpshm_servo_create(struct config *cfg) { return NULL; }
struct servo *nullf_servo_create(void) { return NULL; }
struct servo *refclock_sock_servo_create(struct config *cfg) { return NULL; }

/* ---- driver ---- */
int main(int argc, char **argv)
{
	double interval = 1.0, drift = 0.0, phase = 0.0;
	int max_ppb = 100000000, sw_ts = 0, n = 20, noise = 0;
	long long ev_at = -1, ev_ns = 0, delay = 0;
	uint64_t seed = 1, t0 = 1000000000ULL;
	int i;

	for (i = 1; i < argc; i++) {
		char *k = argv[i], *v = strchr(argv[i], '=');
		if (!v) { fprintf(stderr, "bad arg %s\n", k); return 2; }
		*v++ = 0;
		if (!strcmp(k, "interval")) interval = atof(v);
		else if (!strcmp(k, "kp")) c_kp = atof(v);
		else if (!strcmp(k, "ki")) c_ki = atof(v);
		else if (!strcmp(k, "step")) c_step = atof(v);
		else if (!strcmp(k, "first_step")) c_first = atof(v);
		else if (!strcmp(k, "max_frequency")) c_maxfreq = atoi(v);
		else if (!strcmp(k, "offset_threshold")) c_offthr = atoi(v);
		else if (!strcmp(k, "num_offset_values")) c_numoff = atoi(v);
		else if (!strcmp(k, "max_ppb")) max_ppb = atoi(v);
		else if (!strcmp(k, "sw_ts")) sw_ts = atoi(v);
		else if (!strcmp(k, "n")) n = atoi(v);
		else if (!strcmp(k, "drift_ppb")) drift = atof(v);
		else if (!strcmp(k, "phase_ns")) phase = atof(v);
		else if (!strcmp(k, "noise_ns")) noise = atoi(v);
		else if (!strcmp(k, "seed")) seed = strtoull(v, NULL, 10);
		else if (!strcmp(k, "event_at")) ev_at = atoll(v);
		else if (!strcmp(k, "event_ns")) ev_ns = atoll(v);
		else if (!strcmp(k, "delay")) delay = atoll(v);
		else { fprintf(stderr, "unknown key %s\n", k); return 2; }
	}

	double clock_freq = 0.0; /* what clockadj_get_freq would return */
	struct servo *s = servo_create(NULL, CLOCK_SERVO_PI, -clock_freq, max_ppb, sw_ts);
	servo_sync_interval(s, interval);
	double applied = clock_freq;
	uint64_t interval_ns = (uint64_t)llround(interval * 1e9);
	uint64_t lcg = seed;

	for (i = 0; i < n; i++) {
		if (i == ev_at)
			phase += (double)ev_ns;
		int64_t nz = 0;
		if (noise) {
			lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
			nz = (int64_t)((lcg >> 33) % (uint64_t)(2 * noise + 1)) - noise;
		}
		int64_t offset = llround(phase) + nz;
		uint64_t ts = t0 + (uint64_t)i * interval_ns;
		enum servo_state st = SERVO_UNLOCKED;
		double ppb = servo_sample(s, offset, ts, 1.0, &st);
		switch (st) {
		case SERVO_UNLOCKED:
			break;
		case SERVO_JUMP:
			phase -= (double)offset;
			/* fall through */
		case SERVO_LOCKED:
		case SERVO_LOCKED_STABLE:
			applied = -ppb;
			break;
		}
		printf("%d %" PRId64 " %d %.9f | offset %9" PRId64 " s%d freq %+7.0f delay %6lld\n",
		       i, offset, st, ppb, offset, st, ppb, delay);
		phase += (drift + applied) * interval;
	}
	return 0;
}
