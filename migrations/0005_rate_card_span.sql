-- When each rate card version is in force: from its effective_from until the next version's
-- (null: in force now). The one place the effective-dating rule is written; invoice runs, exports
-- and the dashboard join hours to it.
create view rate_card_span as
select rate_card_id, effective_from,
       lead(effective_from) over (order by effective_from) as effective_until
from rate_card;
