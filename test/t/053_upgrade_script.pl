
# Copyright (c) 2026, the fencing developers
#
# The install script of the current version and the chain of update scripts
# from 1.0 must build the same extension: a database created at the current
# version and one created at 1.0 and updated hold the same objects, with the
# same definitions, privileges, comments and dump configuration.  A change
# made to one script and forgotten in the other fails here.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('upgrade_script');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'fencing'");
$node->start;

my $current = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'fencing'");
isnt($current, '1.0', "the current version ($current) is not 1.0");

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('postgres', 'CREATE DATABASE updated');
$node->safe_psql('fresh', 'CREATE EXTENSION fencing');
$node->safe_psql('updated', "CREATE EXTENSION fencing VERSION '1.0'");
is($node->safe_psql('updated',
		"SELECT extversion FROM pg_extension WHERE extname = 'fencing'"),
	'1.0', 'the 1.0 install script still works');
# Between the server's upgrade and ALTER EXTENSION UPDATE, the new library
# serves the 1.0 objects: the view still has 1.0's "untracked" column, now
# always NULL.
is( $node->safe_psql(
		'updated',
		"BEGIN; SELECT fencing.try_lock('before update') IS NOT NULL;
		 SELECT name, untracked IS NULL FROM fencing.locks; COMMIT"),
	"t\nbefore update|t",
	'the 1.0 view works with the new library');
# fencing.stats gained columns in 1.1 after those of 1.0; the 1.0
# declaration still reads its own.
is( $node->safe_psql(
		'updated',
		"SELECT locks_granted > 0, stats_reset IS NOT NULL FROM fencing.stats"),
	"t|t",
	'the 1.0 stats view works with the new library');
$node->safe_psql('updated', 'ALTER EXTENSION fencing UPDATE');
is($node->safe_psql('updated',
		"SELECT extversion FROM pg_extension WHERE extname = 'fencing'"),
	$current, "ALTER EXTENSION fencing UPDATE reaches $current");

# One line per member object of the extension: its identity, its full
# definition where it has one, its owner-independent privileges and its
# comment.  Ordered, so two databases compare line by line.
my $describe = <<'SQL';
SELECT pg_describe_object(d.classid, d.objid, 0)
       || ' | ' || coalesce(CASE d.classid
            WHEN 'pg_proc'::regclass THEN pg_get_functiondef(d.objid)
                 || ' acl=' || coalesce(
                    (SELECT regexp_replace(p.proacl::text, '=[a-zA-Z*]*/[^,}]*', '', 'g')
                     || ':' || p.proacl::text FROM pg_proc p WHERE p.oid = d.objid), 'default')
            WHEN 'pg_class'::regclass THEN
                 (SELECT c.relkind::text || ' acl=' || coalesce(c.relacl::text, 'default')
                         || ' cols=' || (SELECT string_agg(a.attname || ' ' ||
                                format_type(a.atttypid, a.atttypmod) ||
                                CASE WHEN a.attnotnull THEN ' not null' ELSE '' END ||
                                coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), '') ||
                                coalesce(' collate ' || co.collname, ''),
                                ', ' ORDER BY a.attnum)
                             FROM pg_attribute a
                             LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                             LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
                                   AND co.collname <> 'default'
                             WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
                         || coalesce(' view=' || pg_get_viewdef(c.oid), '')
                  FROM pg_class c WHERE c.oid = d.objid)
            WHEN 'pg_type'::regclass THEN (SELECT t.typtype::text FROM pg_type t WHERE t.oid = d.objid)
            WHEN 'pg_event_trigger'::regclass THEN
                 (SELECT e.evtevent || ' ' || e.evtfoid::regproc::text || ' ' ||
                         coalesce(e.evttags::text, '') || ' ' || e.evtenabled::text
                  FROM pg_event_trigger e WHERE e.oid = d.objid)
            ELSE '' END, '')
       || ' | comment=' || coalesce(obj_description(d.objid, d.classid::regclass::name), '')
  FROM pg_depend d
 WHERE d.refclassid = 'pg_extension'::regclass
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'fencing')
   AND d.deptype = 'e'
 UNION ALL
SELECT 'config: ' || array_to_string(ARRAY(SELECT unnest(extconfig)::regclass::text ORDER BY 1), ',')
       || ' conditions: ' || coalesce(array_to_string(extcondition, ','), '')
  FROM pg_extension WHERE extname = 'fencing'
 UNION ALL
SELECT 'schema acl: ' || coalesce(nspacl::text, 'default') FROM pg_namespace WHERE nspname = 'fencing'
 ORDER BY 1
SQL

my $fresh = $node->safe_psql('fresh', $describe);
my $updated = $node->safe_psql('updated', $describe);
# the schema's and objects' owner is the same bootstrap superuser in both
cmp_ok(scalar(split /\n/, $fresh), '>', 20, 'the fresh install has the objects of the extension');
is($updated, $fresh,
	"1.0 updated to $current holds the same objects as a fresh $current install");

$node->stop;
done_testing();
