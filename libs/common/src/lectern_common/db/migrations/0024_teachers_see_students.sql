-- A tenant may let teachers see each student of their classes (struggles and mastered topics,
-- with the evidence in a few words), not only the class's aggregates. NULL: aggregates only,
-- the default: a student's memories stay theirs unless the school decides otherwise.
ALTER TABLE tenant_settings ADD COLUMN teachers_see_students boolean;
