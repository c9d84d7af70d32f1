-- The `student_club` database of tests/data/datasets/bird.json, a few rows in BIRD's layout;
-- tests build it into <db_dir>/student_club/student_club.sqlite (sqlite3 executescript).
CREATE TABLE major (
    major_id TEXT PRIMARY KEY,
    major_name TEXT,
    department TEXT
);
CREATE TABLE member (
    member_id TEXT PRIMARY KEY,
    first_name TEXT,
    last_name TEXT,
    link_to_major TEXT REFERENCES major (major_id)
);
CREATE TABLE income (
    income_id TEXT PRIMARY KEY,
    date_received TEXT,
    amount INTEGER,
    link_to_member TEXT REFERENCES member (member_id)
);
INSERT INTO major VALUES ('m1', 'Physics', 'Science'), ('m2', 'Chemistry', 'Science'),
    ('m3', 'History', 'Humanities');
INSERT INTO member VALUES ('p1', 'Ada', 'Byron', 'm1'), ('p2', 'Marie', 'Curie', 'm2'),
    ('p3', 'Carl', 'Sagan', 'm1'), ('p4', 'Mary', 'Beard', 'm3');
INSERT INTO income VALUES ('i1', '2019-09-01', 25, 'p1'), ('i2', '2019-09-03', 10, 'p2'),
    ('i3', '2019-10-01', 15, 'p2'), ('i4', '2019-10-05', 5, 'p3'), ('i5', '2019-11-11', 30, 'p4');
