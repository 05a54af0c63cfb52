/*-------------------------------------------------------------------------
 *
 * hash_collision.c
 *		Find two lock names whose hashtextextended(name, 0) keys are equal,
 *		for the L6 test (test/isolation/specs/locks_collision.spec).
 *
 * A 64-bit collision cannot be found by trying names at random, but
 * Brent's cycle-finding algorithm on f(x) = hash(name(x)), with name(x) =
 * "k" followed by the 16 hex digits of x, finds one in about 2^33 hash
 * evaluations and constant memory: a few minutes on one core.  The names are
 * already canonical (lower-case ASCII), so their fencing.lock_key() values
 * collide too.  Not part of the build; run it by hand:
 *
 *	gcc -O2 -I$(pg_config --includedir-server) test/tools/hash_collision.c \
 *		$(pg_config --pkglibdir)/libpgcommon.a $(pg_config --pkglibdir)/libpgport.a \
 *		-o hash_collision && ./hash_collision 0x1234567
 *
 * Copyright (c) 2026, the fencing developers
 *
 * IDENTIFICATION
 *		test/tools/hash_collision.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/hashfn.h"

#define NAME_LEN	17

/* The name of point x: "k" and x in 16 lower-case hex digits. */
static void
name_of(uint64 x, char *buf)
{
	static const char digits[] = "0123456789abcdef";
	int			i;

	buf[0] = 'k';
	for (i = 0; i < 16; i++)
		buf[1 + i] = digits[(x >> (60 - 4 * i)) & 0xf];
	buf[NAME_LEN] = '\0';
}

/* One step of the walk: the key of the name of x, as hashtextextended. */
static uint64
step(uint64 x)
{
	char		buf[NAME_LEN + 1];

	name_of(x, buf);
	return hash_bytes_extended((const unsigned char *) buf, NAME_LEN, 0);
}

/*
 * Brent's algorithm finds the cycle length; walking two pointers that far
 * apart from the start then meets at the cycle's entry, whose two
 * predecessors are the colliding names.
 */
int
main(int argc, char **argv)
{
	uint64		start = argc > 1 ? strtoull(argv[1], NULL, 0) : 1;
	uint64		power = 1,
				length = 1,
				tortoise = start,
				hare = step(start),
				i;

	while (tortoise != hare)
	{
		if (power == length)
		{
			tortoise = hare;
			power *= 2;
			length = 0;
		}
		hare = step(hare);
		length++;
	}

	tortoise = hare = start;
	for (i = 0; i < length; i++)
		hare = step(hare);
	if (tortoise == hare)
	{
		fprintf(stderr, "the start lies on the cycle; try another start\n");
		return 1;
	}
	for (;;)
	{
		uint64		next_tortoise = step(tortoise);
		uint64		next_hare = step(hare);

		if (next_tortoise == next_hare)
		{
			char		a[NAME_LEN + 1],
						b[NAME_LEN + 1];

			name_of(tortoise, a);
			name_of(hare, b);
			printf("%s %s %lld\n", a, b, (long long) next_tortoise);
			return 0;
		}
		tortoise = next_tortoise;
		hare = next_hare;
	}
}
