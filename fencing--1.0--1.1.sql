/* fencing--1.0--1.1.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "ALTER EXTENSION fencing UPDATE TO '1.1'" to load this file. \quit

/*
 * 1.0 to 1.1.  Every change here is also in fencing--1.1.sql, so that a
 * database updated from 1.0 and one created at 1.1 hold the same objects
 * (test/t/053_upgrade_script.pl compares them).
 */
